// terminal.mjs — the terminal page in headless Chromium, as a person uses it: the page loads,
// typing `echo hi` shows `hi`, resizing the window reaches `stty size`, and a screenshot is
// saved. Run by test-terminal (terminal_page_in_headless_chromium) with TERMINAL_URL and
// SCREENSHOT set; prints "ok rows=R cols=C" on success, the screen's text on failure.
import puppeteer from 'puppeteer-core';

const url = process.env.TERMINAL_URL;
const shot = process.env.SCREENSHOT;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 800, height: 480 });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.paddockTerminal && window.paddockTerminal.ws.readyState === 1,
    { timeout: 20000 });
  const screen = () => page.evaluate(() => {
    const b = window.paddockTerminal.term.buffer.active;
    let s = '';
    for (let i = 0; i < b.length; i++) {
      const l = b.getLine(i);
      if (l) s += l.translateToString(true) + '\n';
    }
    return s;
  });
  const waitFor = async (re) => {
    const t0 = Date.now();
    for (;;) {
      const s = await screen();
      if (re.test(s)) return s;
      if (Date.now() - t0 > 20000) throw new Error('no ' + re + ' on the screen:\n' + s);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const dims = () => page.evaluate(() => [window.paddockTerminal.term.rows, window.paddockTerminal.term.cols]);
  await page.click('#t');
  await page.keyboard.type('echo hi\n');
  // the prompt after it: bash's readline reads the size and writes it back as it prepares
  // a prompt, so a resize before that can be undone (on any Linux)
  await waitFor(/^hi\s*\n[^\n]*[#$]\s*$/m);
  const before = await dims();
  await page.setViewport({ width: 1100, height: 700 });
  let after = await dims();
  for (let i = 0; i < 50 && after[0] === before[0] && after[1] === before[1]; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await dims();
  }
  if (after[0] === before[0] && after[1] === before[1]) throw new Error('the terminal did not follow the window: ' + before);
  await page.keyboard.type('stty size\n');
  await waitFor(new RegExp('^' + after[0] + ' ' + after[1] + '\\s*$', 'm'));
  if (shot) await page.screenshot({ path: shot });
  console.log('ok rows=' + after[0] + ' cols=' + after[1] + ' (was ' + before[0] + 'x' + before[1] + ')');
} finally {
  await browser.close();
}
