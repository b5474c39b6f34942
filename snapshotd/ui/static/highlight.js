// A small syntax highlighter written for snapshotd (MIT, as the project): keywords, strings,
// comments and numbers of common languages, one line at a time. Returns DOM nodes, never HTML
// strings, so file content can never become markup.
"use strict";
const SDHighlight = (() => {
  const KW = new Set(("and as assert async await break case catch class const continue def del " +
    "do elif else enum except export extends false False final finally fn for from func function " +
    "go if impl import in interface is lambda let loop match mod mut new nil None not null or " +
    "package pass pub raise return self static struct super switch this throw true True try " +
    "type typeof use var void while with yield").split(" "));
  const HASH = /\.(py|sh|rb|toml|ya?ml|pl|r|conf|cfg|ini|mk)$|(^|\/)(Makefile|Dockerfile)$/i;
  const SLASH = /\.(js|ts|jsx|tsx|c|h|cc|cpp|hpp|java|go|rs|kt|swift|cs|scala|php|css|scss)$/i;
  const TOKEN = /("(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|`[^`]*`?)|(\b\d[\d_.xXa-fA-F]*\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

  function lang(path) {
    if (HASH.test(path)) return "#";
    if (SLASH.test(path)) return "//";
    return null;
  }

  function line(text, path) {
    const frag = document.createDocumentFragment();
    const mark = lang(path);
    if (mark === null) { frag.append(text); return frag; }
    let code = text, comment = "";
    const at = findComment(text, mark);
    if (at >= 0) { code = text.slice(0, at); comment = text.slice(at); }
    let last = 0;
    for (const m of code.matchAll(TOKEN)) {
      const cls = m[1] ? "s" : m[2] ? "n" : KW.has(m[3]) ? "k" : null;
      if (!cls) continue;
      frag.append(code.slice(last, m.index));
      const span = document.createElement("span");
      span.className = "hl-" + cls;
      span.textContent = m[0];
      frag.append(span);
      last = m.index + m[0].length;
    }
    frag.append(code.slice(last));
    if (comment) {
      const span = document.createElement("span");
      span.className = "hl-c";
      span.textContent = comment;
      frag.append(span);
    }
    return frag;
  }

  function findComment(text, mark) {
    let quote = null;
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (quote) { if (ch === "\\") i++; else if (ch === quote) quote = null; continue; }
      if (ch === '"' || ch === "'" || ch === "`") { quote = ch; continue; }
      if (text.startsWith(mark, i)) return i;
    }
    return -1;
  }

  return { line };
})();
