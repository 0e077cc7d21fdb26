// Reads a CAR v1 file with the IPLD project's @ipld/car and re-checks every block:
// prints one JSON line {roots, blocks: [{cid, codec, size, decoded}]}, and with a second
// argument writes the same blocks to a new CAR file with @ipld/car's CarWriter.
import fs from 'node:fs'
import { Readable } from 'node:stream'
import { CarReader, CarWriter } from '@ipld/car'
import * as dagCbor from '@ipld/dag-cbor'
import { sha256 } from 'multiformats/hashes/sha2'

const [input, output] = process.argv.slice(2)
const reader = await CarReader.fromBytes(fs.readFileSync(input))
const roots = (await reader.getRoots()).map(String)
const blocks = []
for await (const { cid, bytes } of reader.blocks()) {
  let decoded = null
  if (cid.code === dagCbor.code) {
    // Strict decode, then re-encode: canonical DAG-CBOR gives back the same bytes.
    const again = dagCbor.encode(dagCbor.decode(bytes))
    decoded = Buffer.compare(Buffer.from(again), Buffer.from(bytes)) === 0
  }
  let hashOk = null
  if (cid.multihash.code === sha256.code) {
    const digest = await sha256.digest(bytes)
    hashOk = Buffer.compare(Buffer.from(digest.digest), Buffer.from(cid.multihash.digest)) === 0
  }
  blocks.push({ cid: String(cid), codec: cid.code, size: bytes.length, canonical: decoded, hashOk })
}
if (output) {
  const { writer, out } = CarWriter.create((await reader.getRoots()))
  const sink = fs.createWriteStream(output)
  const done = new Promise((resolve, reject) => { sink.on('finish', resolve); sink.on('error', reject) })
  Readable.from(out).pipe(sink)
  for await (const block of reader.blocks()) await writer.put(block)
  await writer.close()
  await done
}
console.log(JSON.stringify({ roots, blocks }))
