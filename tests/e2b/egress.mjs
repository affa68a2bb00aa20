// egress.mjs — E2B's network rules with the current SDK (issue 39), as a user writes them: a secret
// made with Secret.create, put into a request header by the node's egress proxy through
// Secret.fill's placeholder, never held by the sandbox. Configured by environment only (E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL); EGT_SECRET names the secret, EGT_VALUE is its value. The test
// host api.egt.test is allowed, bad.egt.test has rules but is not allowed (E2B: rules open nothing).
// test-controld-egress runs it and reads "ok <step>" lines and what the test hosts received.
import assert from 'node:assert/strict'
import { Sandbox, Secret } from 'e2b'

const ok = (what) => console.log(`ok ${what}`)
const name = process.env.EGT_SECRET
await Secret.create(name, process.env.EGT_VALUE)
ok('secret')
const fetch = (url) => `python3 -c "import urllib.request as u, urllib.error as e
try:
  r = u.urlopen(u.Request('${url}', headers={'x-api-key': 'placeholder'}), timeout=5)
  print(r.status, r.read().decode().strip())
except e.HTTPError as x:
  print(x.code)
except Exception as x:
  print('ERR', type(x).__name__)"`
const rules = (extra) => ({
  'api.egt.test': [{ transform: { headers: { 'x-api-key': Secret.fill(name), ...extra } } }],
  'bad.egt.test': [{ transform: { headers: { 'x-api-key': Secret.fill(name) } } }],
})
const sbx = await Sandbox.create({
  timeoutMs: 300_000,
  network: { denyOut: ['0.0.0.0/0'], allowOut: ['api.egt.test'], rules: rules({}) },
})
try {
  assert.equal((await sbx.commands.run(fetch('https://api.egt.test/e2b-first'))).stdout, '200 ok\n')
  ok('rule applied')
  // a host with rules that allowOut does not list stays closed
  assert.match((await sbx.commands.run(fetch('https://198.51.100.3/'))).stdout, /^ERR /)
  ok('rules open nothing')
  // the sandbox's info shows the rules as given, placeholders and all
  const info = await sbx.getInfo()
  assert.deepEqual(info.network?.rules?.['api.egt.test'], [{ transform: { headers: { 'x-api-key': `\${e2b.secrets.${name}}` } } }])
  ok('info')
  // updateNetwork replaces them: the next request carries the new header
  await sbx.updateNetwork({ denyOut: ['0.0.0.0/0'], allowOut: ['api.egt.test'], rules: rules({ 'x-e2b': 'second' }) })
  assert.equal((await sbx.commands.run(fetch('https://api.egt.test/e2b-second'))).stdout, '200 ok\n')
  ok('update')
  const env = (await sbx.commands.run('env; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"')).stdout
  assert.ok(!env.includes(process.env.EGT_VALUE), 'the sandbox holds the value')
  ok('no value inside')
} finally {
  await sbx.kill()
}
