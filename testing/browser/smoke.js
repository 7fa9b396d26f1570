// A check that the browser tooling works: opens a data: page in Debian's chromium.
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                          args: ['--no-sandbox'] });
  const page = await browser.newPage();
  await page.setContent('<p id="x">ok</p>');
  const t = await page.textContent('#x');
  await browser.close();
  if (t !== 'ok') { console.error('unexpected text', t); process.exit(1); }
  console.log('chromium ok');
})().catch((e) => { console.error(e); process.exit(1); });
