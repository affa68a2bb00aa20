// envd.mjs — the current E2B SDK's filesystem calls as its own tests make them (issue 38), against
// Paddock configured by environment only (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, as sdk.mjs).
// test-envd runs it and reads "ok <step>" lines; a failure exits non-zero with its message.
import assert from 'node:assert/strict'
import { Sandbox, FileType, SandboxError } from 'e2b'

const ok = (what) => console.log(`ok ${what}`)
const sbx = await Sandbox.create({ timeoutMs: 300_000 })
try {
  // files.remove of a missing path succeeds, as envd's
  await sbx.files.remove('/root/never-was')
  ok('remove missing')

  // getInfo of a symlink: the link, its target resolved, "Lrwx..." permissions
  await sbx.files.write('test_file.txt', 'test')
  await sbx.commands.run('ln -s test_file.txt test_symlink.txt')
  const info = await sbx.files.getInfo('test_symlink.txt')
  const { stdout: cwd } = await sbx.commands.run('pwd')
  assert.equal(info.name, 'test_symlink.txt')
  assert.equal(info.symlinkTarget, cwd.trim() + '/test_file.txt')
  assert.match(info.permissions, /^Lrwx/)
  const plain = await sbx.files.getInfo('test_file.txt')
  assert.equal(plain.symlinkTarget, undefined)
  assert.equal(plain.type, FileType.FILE)
  assert.equal(plain.mode, 0o644)
  ok('getInfo symlink')

  // list: sorted by name, depth 2 each directory followed by its entries
  for (const d of ['ls/subdir2', 'ls/subdir1/b', 'ls/subdir1/a']) await sbx.files.makeDir(d)
  await sbx.files.write('ls/file1.txt', 'x')
  const one = await sbx.files.list('ls')
  assert.deepEqual(one.map((e) => e.name), ['file1.txt', 'subdir1', 'subdir2'])
  assert.deepEqual(one.map((e) => e.type), [FileType.FILE, FileType.DIR, FileType.DIR])
  const two = await sbx.files.list('ls', { depth: 2 })
  assert.deepEqual(two.map((e) => e.path), ['file1.txt', 'subdir1', 'subdir1/a', 'subdir1/b', 'subdir2'].map((p) => `${cwd.trim()}/ls/${p}`))
  ok('list sorted')

  // write with gzip: true (Content-Encoding: gzip), read back plain
  const text = 'gzip me '.repeat(1000)
  await sbx.files.write('gz.txt', text, { gzip: true })
  assert.equal(await sbx.files.read('gz.txt'), text)
  ok('write gzip')

  // a killed sandbox: envd answers 502 with E2B's body; the SDK says it is not running
  const gone = await Sandbox.create({ timeoutMs: 300_000 })
  await gone.kill()
  await assert.rejects(gone.files.read('/etc/hostname'), (e) => e instanceof SandboxError && !/401|unauthori/i.test(e.message))
  await assert.rejects(gone.files.list('/'), (e) => e instanceof SandboxError && !/401|unauthori/i.test(e.message))
  assert.equal(await gone.isRunning(), false)
  ok('killed sandbox')
} finally {
  await sbx.kill()
}
ok('done')
