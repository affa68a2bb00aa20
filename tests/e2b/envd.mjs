// envd.mjs — the current E2B SDK's filesystem calls as its own tests make them (issue 38), against
// Paddock configured by environment only (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL, as sdk.mjs).
// test-envd runs it and reads "ok <step>" lines; a failure exits non-zero with its message.
import assert from 'node:assert/strict'
import { Sandbox, FileType, SandboxError, TimeoutError } from 'e2b'

const ok = (what) => console.log(`ok ${what}`)
const sbx = await Sandbox.create({ timeoutMs: 300_000 })
try {
  // E2B's base (issue 38): user `user` in /home/user by default, sudo, root when named
  assert.equal((await sbx.commands.run('whoami')).stdout, 'user\n')
  assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  assert.equal((await sbx.commands.run('sudo whoami')).stdout, 'root\n')
  await sbx.files.write('/home/user/x', 'hello')
  assert.match((await sbx.commands.run('ls -l /home/user/x')).stdout, /^-rw-r--r-- 1 user user 5 /)
  await sbx.files.write('made/by/sdk.txt', 'deep')
  assert.equal((await sbx.commands.run('stat -c %U made made/by made/by/sdk.txt')).stdout, 'user\nuser\nuser\n')
  // and envd says so, as E2B's does (getInfo and list read the owner, not a fixed root)
  const owned = await sbx.files.getInfo('/home/user/x')
  assert.equal(owned.owner, 'user')
  assert.equal(owned.group, 'user')
  assert.equal((await sbx.files.getInfo('/etc/hostname')).owner, 'root')
  const listed = (await sbx.files.list('/home/user')).find((e) => e.name === 'x')
  assert.equal(listed?.owner, 'user')
  await assert.rejects(sbx.commands.run('true', { user: 'nobody' }), (e) => /no user "nobody"/.test(e.message))
  ok('e2b user')
  // agent frameworks: pip install (a local wheel: no network here), venv, node, as user
  assert.match((await sbx.commands.run('python3 -m pip --version')).stdout, /^pip /)
  await sbx.commands.run(`mkdir -p w && python3 -c "
import zipfile
z = zipfile.ZipFile('w/sdk_probe-0.1-py3-none-any.whl', 'w')
z.writestr('sdk_probe/__init__.py', 'VALUE = 7\\n')
z.writestr('sdk_probe-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: sdk-probe\\nVersion: 0.1\\n')
z.writestr('sdk_probe-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')
z.writestr('sdk_probe-0.1.dist-info/RECORD', '')
"`)
  await sbx.commands.run('pip install --user --no-index w/sdk_probe-0.1-py3-none-any.whl')
  assert.equal((await sbx.commands.run('python3 -c "import sdk_probe; print(sdk_probe.VALUE, sdk_probe.__file__)"')).stdout,
    '7 /home/user/.local/lib/python3.11/site-packages/sdk_probe/__init__.py\n')
  await sbx.commands.run('python3 -m venv v && v/bin/pip install --no-index w/sdk_probe-0.1-py3-none-any.whl')
  assert.equal((await sbx.commands.run('v/bin/python -c "import sdk_probe; print(sdk_probe.VALUE)"')).stdout, '7\n')
  assert.match((await sbx.commands.run('node --version')).stdout, /^v\d+\./)
  // npm as user, offline: a local package installed into the project
  await sbx.commands.run(`mkdir -p pkg proj && printf '{"name":"probe","version":"1.0.0","main":"i.js"}' > pkg/package.json && echo 'module.exports = 42' > pkg/i.js`)
  await sbx.commands.run('cd proj && npm install --offline --no-audit --no-fund ../pkg')
  assert.equal((await sbx.commands.run('cd proj && node -e "console.log(require(\'probe\'))"')).stdout, '42\n')
  ok('pip venv node npm')

  // files.remove of a missing path succeeds, as envd's
  await sbx.files.remove('/home/user/never-was')
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

  // a command running when its sandbox is killed ends with the SDK's error for that
  const doomed = await Sandbox.create({ timeoutMs: 300_000 })
  let started
  const seen = new Promise((resolve) => { started = resolve })
  const running = doomed.commands.run('echo started; sleep 120', { onStdout: () => started() })
  await seen
  await Sandbox.kill(doomed.sandboxId)
  await assert.rejects(running, (e) => e instanceof TimeoutError && /killed or reached its end of life/.test(e.message))
  ok('killed mid-stream')
} finally {
  await sbx.kill()
}
ok('done')
