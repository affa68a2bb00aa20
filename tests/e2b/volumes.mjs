// volumes.mjs — E2B's volumes with the current SDK (issue 38), configured by environment only
// (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL): Volume.create, list, getInfo, destroy, and
// Sandbox.create({ volumeMounts }) onto Paddock's volumes. A volume's files are reached through a
// sandbox that mounts it (the volume-content API answers 501 saying so). test-envd runs it and
// reads "ok <step>" lines; a failure exits non-zero with its message.
import assert from 'node:assert/strict'
import { Sandbox, Volume } from 'e2b'

const ok = (what) => console.log(`ok ${what}`)
const name = `data_${process.pid}`
const vol = await Volume.create(name)
assert.equal(vol.name, name)
assert.match(vol.volumeId, /^[0-9a-f]{24}$/)
assert.ok(vol.token.length > 0)
ok('create')
assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === name))
assert.equal((await Volume.getInfo(vol.volumeId)).name, name)
await assert.rejects(Volume.create(name), (e) => /already exists/.test(e.message))
await assert.rejects(Volume.create('no spaces'), (e) => /name must be/.test(e.message))
ok('list and info')

// what one sandbox writes to the volume, the next one that mounts it reads
let sbx = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 120_000 })
await sbx.files.write('/data/kept.txt', 'across sandboxes')
assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name, path: '/data' }])
// mounted by one sandbox at a time here
await assert.rejects(Volume.destroy(vol.volumeId), (e) => /mounted by a sandbox/.test(e.message))
await sbx.kill()
sbx = await Sandbox.create({ volumeMounts: { '/mnt/v': name }, timeoutMs: 120_000 })
try {
  assert.equal(await sbx.files.read('/mnt/v/kept.txt'), 'across sandboxes')
} finally {
  await sbx.kill()
}
ok('mounted')

// the volume-content API is not served: it says how instead
await assert.rejects(vol.list('/'), (e) => /mounts it/.test(e.message))
assert.equal(await Volume.destroy(vol.volumeId), true)
assert.equal(await Volume.destroy(vol.volumeId), false)
await assert.rejects(Sandbox.create({ volumeMounts: { '/data': name } }), (e) => /no volume named/.test(e.message))
await assert.rejects(Sandbox.create({ volumeMounts: { '/proc/x': 'v' } }), (e) => /volumeMounts\[0\]\.path/.test(e.message))
ok('done')
