// volumes.mjs — E2B's volumes with the current SDK (issue 38), configured by environment only
// (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL): Volume.create, list, getInfo, destroy, and
// Sandbox.create({ volumeMounts }) onto Paddock's volumes, and the volume-content API (writeFile,
// readFile, list, makeDir, getInfo, exists, updateMetadata, remove) without a sandbox of the
// caller's: the server reaches the files through one that mounts the volume. test-envd runs it
// and reads "ok <step>" lines; a failure exits non-zero with its message.
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

// a volume's files without a sandbox: write, read, list, mkdir, info, metadata, remove
const info0 = await vol.writeFile('/notes/a.txt', 'hello volume', { force: true })
assert.equal(info0.name, 'a.txt')
assert.equal(info0.path, '/notes/a.txt')
assert.equal(info0.type, 'file')
assert.equal(info0.size, 12)
assert.ok(info0.mtime instanceof Date && !isNaN(info0.mtime))
assert.equal(await vol.readFile('/notes/a.txt'), 'hello volume')
assert.deepEqual(Array.from(await vol.readFile('notes/a.txt', { format: 'bytes' })).length, 12)
const d = await vol.makeDir('/notes/sub')
assert.equal(d.type, 'directory')
await vol.writeFile('/notes/sub/b.bin', new Uint8Array([0, 1, 2, 255]))
await assert.rejects(vol.makeDir('/notes/sub'), (e) => /there already/.test(e.message))
await vol.makeDir('/notes/sub', { force: true })
const one = await vol.list('/notes')
assert.deepEqual(one.map((e) => e.name).sort(), ['a.txt', 'sub'])
const two = await vol.list('/notes', { depth: 2 })
assert.deepEqual(two.map((e) => e.path).sort(), ['/notes/a.txt', '/notes/sub', '/notes/sub/b.bin'])
assert.equal((await vol.getInfo('/notes/sub/b.bin')).size, 4)
assert.equal(await vol.exists('/notes/a.txt'), true)
assert.equal(await vol.exists('/notes/none'), false)
const m = await vol.updateMetadata('/notes/a.txt', { mode: 0o640, uid: 1000, gid: 1000 })
assert.equal(m.mode, 0o640)
assert.equal(m.uid, 1000)
await assert.rejects(vol.readFile('/notes/none.txt'), (e) => e.name === 'VolumePathNotFoundError' || /not found/.test(e.message))
await assert.rejects(vol.getInfo('/notes/../../etc/passwd'), (e) => /\.\./.test(e.message))
await vol.remove('/notes/sub')
assert.equal(await vol.exists('/notes/sub'), false)
await assert.rejects(vol.remove('/notes/sub'), (e) => e.name === 'VolumePathNotFoundError' || /not found/.test(e.message))
// bad input, raw: each refused naming what is wrong
{
  const base = `${process.env.E2B_API_URL}/volumecontent/${vol.volumeId}`
  const h = { Authorization: `Bearer ${vol.token}` }
  const expect = async (res, status, re) => {
    const text = await res.text()
    assert.equal(res.status, status, text)
    assert.match(text, re)
  }
  await expect(await fetch(`${base}/dir?path=/&depth=abc`, { headers: h }), 400, /depth/)
  await expect(await fetch(`${base}/dir?path=/&depth=99`, { headers: h }), 400, /depth/)
  await expect(await fetch(`${base}/nope?path=/`, { headers: h }), 404, /dir, file or path/)
  await expect(await fetch(`${base}/dir?path=/`, { method: 'DELETE', headers: h }), 405, /dir/)
  await expect(await fetch(`${base}/path?path=/`, { method: 'DELETE', headers: h }), 400, /root/)
  await expect(await fetch(`${base}/file?path=/notes`, { headers: h }), 400, /not a file/)
  const json = { ...h, 'content-type': 'application/json' }
  await expect(await fetch(`${base}/path?path=/notes/a.txt`, { method: 'PATCH', headers: json, body: '{"mode": 99999}' }), 400, /mode/)
  await expect(await fetch(`${base}/path?path=/notes/a.txt`, { method: 'PATCH', headers: json, body: '{"owner": 1}' }), 400, /owner/)
  await expect(await fetch(`${base}/file?path=/x.txt&uid=-1`, { method: 'PUT', headers: h, body: 'x' }), 400, /uid/)
  await expect(await fetch(`${base}/dir?path=/`, {}), 401, /token/)
}
// another volume's token opens nothing of this one
const other = await Volume.create(`${name}_o`)
const forged = new Volume(vol.volumeId, vol.name, other.token)
await assert.rejects(forged.list('/'), (e) => /token/.test(e.message))
assert.equal(await Volume.destroy(other.volumeId), true)
ok('content')

// what the volume API wrote, a sandbox that mounts the volume reads at once (the server's own
// sandbox that reached the files lets the volume go); what one sandbox writes, the next reads
let sbx = await Sandbox.create({ volumeMounts: { '/data': vol }, timeoutMs: 120_000 })
assert.equal(await sbx.files.read('/data/notes/a.txt'), 'hello volume')
await sbx.files.write('/data/kept.txt', 'across sandboxes')
assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name, path: '/data' }])
// while a sandbox of the user's mounts it, the volume API works through that sandbox
assert.equal(await vol.readFile('/kept.txt'), 'across sandboxes')
await vol.writeFile('/from-api.txt', 'seen inside')
assert.equal(await sbx.files.read('/data/from-api.txt'), 'seen inside')
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

// destroy right after a content call: the server's sandbox lets it go
await vol.writeFile('/last.txt', 'x')
assert.equal(await Volume.destroy(vol.volumeId), true)
assert.equal(await Volume.destroy(vol.volumeId), false)
await assert.rejects(Sandbox.create({ volumeMounts: { '/data': name } }), (e) => /no volume named/.test(e.message))
await assert.rejects(Sandbox.create({ volumeMounts: { '/proc/x': 'v' } }), (e) => /volumeMounts\[0\]\.path/.test(e.message))
ok('done')
