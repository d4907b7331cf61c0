// Parse mermaid diagrams with the real Mermaid parser (mermaid + jsdom from npm).
// Usage: node mermaid_check.mjs DIR < texts.json   (DIR holds node_modules/mermaid and node_modules/jsdom)
// Reads a JSON array of diagram texts; prints a JSON array of {ok, type} or {ok: false, error}.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";

const dir = process.argv[2];
const require = createRequire(join(dir, "noop.js"));
const { JSDOM } = require("jsdom");
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import(pathToFileURL(require.resolve("mermaid")).href);
mermaid.initialize({ startOnLoad: false });

const texts = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const text of texts) {
  try {
    const r = await mermaid.parse(text);
    results.push({ ok: true, type: r.diagramType });
  } catch (e) {
    results.push({ ok: false, error: String(e.message || e) });
  }
}
console.log(JSON.stringify(results));
