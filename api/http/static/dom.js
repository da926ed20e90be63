// omni-decide workbench: the few DOM helpers every part of the page uses. Knows nothing of the API or the pages.

export const $ = (sel, root = document) => root.querySelector(sel);

// An element with attributes and children. "text" sets textContent, "style" goes through the CSSOM (the page's CSP
// refuses style attributes), "on…" adds a listener; null, undefined and false attributes and children are left out.
export const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") Object.assign(node.style, v);
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
  return node;
};

export const pct = (p) => `${(100 * p).toFixed(2)}%`;

// "2026-12-02T10:03:56Z" -> "2026-12-02 10:03" in the reader's time zone (the full time stays in the title)
export const when = (iso) => {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const two = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ${two(date.getHours())}:${two(date.getMinutes())}`;
};
