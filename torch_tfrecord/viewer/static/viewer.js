// torch-tfrecord view: the page. Plain JavaScript, no requests but to the server that sent it.
"use strict";

const PAGE = 20;
const PALETTE = ["#e6194b", "#3cb44b", "#ffe119", "#0082c8", "#f58230", "#911eb4", "#46f0f0", "#f032e6", "#d2f53c", "#fabed4"];
const TOKEN = new URLSearchParams(location.search).get("token");
const view = document.getElementById("view");
let files = null;
let timer = null;

function api(path, params) {
  const query = new URLSearchParams(params || {});
  if (TOKEN) query.set("token", TOKEN);
  return `${path}?${query}`;
}

async function getJSON(path, params) {
  const response = await fetch(api(path, params));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

function bytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function shown(value) {
  if (value === null) return "";
  if (typeof value === "object") {
    if ("hex" in value) return `<${value.bytes} bytes: ${value.hex}…>`;
    return `${value.text}… (${value.bytes} bytes)`;
  }
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

function later(fn, ms) { clearTimeout(timer); timer = setTimeout(fn, ms); }

async function route() {
  clearTimeout(timer);
  const [tab, ...rest] = (location.hash.slice(1) || "files").split("/");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === tab);
  try {
    if (tab !== "records" && !files) files = await getJSON("/api/files");
    if (tab === "records") await showRecords(+rest[0] || 0, +rest[1] || 0);
    else if (tab === "schema") await showSchema();
    else if (tab === "statistics") await showStatistics();
    else if (tab === "search") await showSearch(decodeURIComponent(rest.join("/")));
    else await showFiles();
  } catch (error) {
    view.replaceChildren(el("p", {class: "error", text: `Error: ${error.message}`}));
  }
}

const UNSETTLED = ["pending", "loading", "building"];

function state(shard) {
  if (shard.state === "building" || shard.state === "loading") {
    return el("span", {class: "state"}, el("progress", {max: "1", value: String(shard.progress)}), ` indexing ${Math.round(shard.progress * 100)}%`);
  }
  const name = {ready: "indexed", pending: "index: not loaded yet", unindexed: "no index"}[shard.state] || shard.state;
  return el("span", {class: "state badge", text: name});
}

async function showFiles() {
  files = await getJSON("/api/files");
  const rows = files.files.map((f, i) => el("tr", {class: f.problems.length ? "damaged" : ""},
    el("td", {}, el("a", {href: `#records/${i}/0`, text: f.path})),
    el("td", {text: bytes(f.size)}),
    el("td", {class: "records", text: f.records === null ? "…" : f.records.toLocaleString("en")}),
    el("td", {}, state(f), f.compression ? el("span", {class: "badge", text: f.compression}) : null),
    el("td", {class: "verified"}, f.problems.length ? el("span", {class: "badge bad", text: "damaged"}) : null,
      f.verified === "ok" ? el("span", {class: "badge", text: "verified: no damage"}) : null,
      f.verified === "verifying" ? el("span", {class: "badge partial", text: "verifying…"}) : null,
      f.verified === null ? el("button", {class: "verify", text: "verify", onclick: () => getJSON("/api/verify", {file: i}).then(showFiles)}) : null,
      ...f.problems.map((p) => el("div", {class: "problem", text: p})))));
  view.replaceChildren(el("h2", {text: `${files.files.length} file(s)`}),
    el("table", {id: "files"}, el("tr", {}, ...["file", "size", "records", "index", "damage"].map((h) => el("th", {text: h}))), ...rows));
  if (files.files.some((f) => ["building", "loading", "pending"].includes(f.state) || f.verified === "verifying")) later(route, 500);
}

async function loaded(src) {
  const image = new Image();
  image.src = src;
  await image.decode();
  return image;
}

function rgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)); }

// Each object's pixels of its instance mask (image/object/mask item i, non-zero) tinted half-way to
// its own colour, the colour of its box.
async function drawInstances(ctx, file, record, w, h) {
  const masks = await Promise.all(Array.from({length: record.instance_masks}, (_, i) =>
    loaded(api("/api/blob", {file, record: record.number, key: "image/object/mask", item: i}))));
  const scratch = document.createElement("canvas");
  scratch.width = w; scratch.height = h;
  const sctx = scratch.getContext("2d", {willReadFrequently: true});
  const picture = ctx.getImageData(0, 0, w, h);
  masks.forEach((mask, i) => {
    if (mask.naturalWidth !== w || mask.naturalHeight !== h) throw new Error(`instance mask ${i} is ${mask.naturalWidth}x${mask.naturalHeight}, its image ${w}x${h}`);
    sctx.clearRect(0, 0, w, h);
    sctx.drawImage(mask, 0, 0);
    const on = sctx.getImageData(0, 0, w, h).data;
    const [r, g, b] = rgb(PALETTE[i % PALETTE.length]);
    const px = picture.data;
    for (let p = 0; p < px.length; p += 4) {
      if (on[p + 3] && (on[p] || on[p + 1] || on[p + 2])) {
        px[p] = (px[p] + r) >> 1; px[p + 1] = (px[p + 1] + g) >> 1; px[p + 2] = (px[p + 2] + b) >> 1;
      }
    }
  });
  ctx.putImageData(picture, 0, 0);
}

async function drawImage(canvas, file, record) {
  const image = await loaded(record.image_data || api("/api/blob", {file, record: record.number, key: record.image, item: 0}));
  const w = image.naturalWidth, h = image.naturalHeight;
  canvas.width = w; canvas.height = h;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(image, 0, 0);
  if (record.mask) ctx.drawImage(await loaded(api("/api/mask", {file, record: record.number})), 0, 0);
  if (record.instance_masks) await drawInstances(ctx, file, record, w, h);
  const line = Math.max(2, Math.round(Math.min(w, h) / 100));
  const font = Math.max(12, Math.round(h / 16));
  ctx.font = `${font}px sans-serif`;
  for (const [i, box] of record.boxes.entries()) {
    const x0 = Math.round(box.xmin * w), y0 = Math.round(box.ymin * h);
    const x1 = Math.round(box.xmax * w), y1 = Math.round(box.ymax * h);
    // with instance masks a colour per object (its mask's), else a colour per class
    const colour = PALETTE[(record.instance_masks ? i : (box.label ?? 0)) % PALETTE.length];
    ctx.strokeStyle = colour; ctx.lineWidth = line;
    // The line lies inside the box: pixels x0 .. x0 + line - 1 are the box's edge.
    ctx.strokeRect(x0 + line / 2, y0 + line / 2, x1 - x0 - line, y1 - y0 - line);
    const name = box.name || (box.label ?? "");
    if (name !== "") {
      const tab = ctx.measureText(String(name)).width + 6;
      ctx.fillStyle = colour; ctx.fillRect(x0 + line, y0 + line, tab, font + 4);
      ctx.fillStyle = "#000"; ctx.fillText(String(name), x0 + line + 3, y0 + line + font);
    }
  }
  canvas.dataset.ready = "1";
}

function featureRow(file, record, feature) {
  if (feature.key === record.image && feature.count === 1) {
    return el("tr", {"data-key": feature.key}, el("td", {text: feature.key}), el("td", {class: "kind", text: "image"}), el("td", {class: "more", text: "drawn at the left"}));
  }
  const cells = feature.values.map((v, i) => feature.images.includes(i)
    ? el("img", {class: "thumb", alt: feature.key, src: api("/api/blob", {file, record: record.number, key: feature.key, item: i})})
    : el("span", {text: shown(v) + (i < feature.values.length - 1 ? ", " : "")}));
  const more = feature.count > feature.values.length ? el("span", {class: "more", text: ` … ${feature.count - feature.values.length} more`}) : null;
  return el("tr", {"data-key": feature.key}, el("td", {text: feature.key}),
    el("td", {class: "kind", text: `${feature.kind}[${feature.count}]`}), el("td", {class: "values"}, ...cells, more));
}

function recordCard(file, record, target) {
  const link = el("a", {href: `#records/${file}/${record.number}`, text: "link"});
  const where = record.offset === null ? "" : ` · byte ${record.offset.toLocaleString("en")}`;
  const head = el("h3", {text: `record ${record.number}${where}`}, link);
  const card = el("article", {class: "record", id: `record-${record.number}`, "data-number": String(record.number)}, head);
  if (target) card.classList.add("target");
  if (record.error) {
    card.classList.add("damaged");
    card.append(el("span", {class: "badge bad", text: "damaged"}), el("p", {class: "problem", text: record.error}));
    return card;
  }
  head.append(el("span", {class: "kind", text: ` ${record.kind} · ${record.size} bytes`}));
  if (record.summarised) {
    // too large to read whole: described from its wire format, values fetched one by one
    card.classList.add("summarised");
    head.append(el("span", {class: "badge", text: record.partial ? "summarised (counts are lower bounds)" : "summarised"}));
  }
  const body = el("div", {class: "body"});
  if (record.image) {
    const canvas = el("canvas", {class: "image", "data-number": String(record.number)});
    drawImage(canvas, file, record).catch((e) => canvas.replaceWith(el("span", {class: "error", text: `image: ${e.message}`})));
    body.append(canvas);
  }
  const table = el("table", {class: "features"}, ...record.features.map((f) => featureRow(file, record, f)));
  for (const list of record.feature_lists) {
    table.append(el("tr", {"data-key": list.key}, el("td", {text: list.key}), el("td", {class: "kind", text: `${list.kind} list · ${list.steps} steps`}),
      el("td", {class: "values", text: list.values.map((s) => `[${s.map(shown).join(", ")}]`).join(" ")})));
  }
  if (record.kind === "raw") table.append(el("tr", {}, el("td", {text: "not an Example"}), el("td", {class: "values", text: shown(record.raw)})));
  body.append(table);
  card.append(body);
  return card;
}

async function showRecords(file, start) {
  // the file list and the page at once: one round trip before the first records show
  const [listed, page] = await Promise.all([files || getJSON("/api/files"), getJSON("/api/records", {file, start, count: PAGE})]);
  files = listed;
  const shard = page.shard;
  const select = el("select", {id: "file", onchange: (e) => { location.hash = `records/${e.target.value}/0`; }},
    ...files.files.map((f, i) => el("option", {value: String(i), text: f.path})));
  select.value = String(file);
  const recordInput = el("input", {id: "jump-record", type: "number", min: "0", placeholder: "record"});
  const offsetInput = el("input", {id: "jump-offset", type: "number", min: "0", placeholder: "byte offset"});
  const status = el("span", {id: "status"});
  const jumpOffset = async () => {
    const found = await getJSON("/api/locate", {file, offset: offsetInput.value});
    if (!found.pending) { location.hash = `records/${file}/${found.record}`; return; }
    const shard = (await getJSON("/api/files")).files[file];
    status.textContent = shard.no_jump || "the index is not ready yet";
    // the index is on its way (asking for it let it begin): jump once it is there
    if (UNSETTLED.includes(shard.state)) setTimeout(() => { if (view.dataset.page === `${file}/${start}`) jumpOffset(); }, 300);
  };
  let total = page.total;
  const lastStart = () => (total === null ? null : Math.max(0, total - PAGE));
  const controls = el("div", {class: "controls"}, select,
    el("button", {id: "prev", onclick: () => { location.hash = `records/${file}/${Math.max(0, start - PAGE)}`; }, text: "◀ previous"}),
    el("button", {id: "next", onclick: () => { location.hash = `records/${file}/${page.next ?? start + PAGE}`; }, text: "next ▶"}),
    el("button", {id: "last", onclick: () => { if (lastStart() !== null) location.hash = `records/${file}/${lastStart()}`; else status.textContent = files.files[file].no_jump; }, text: "last »"}),
    el("form", {onsubmit: (e) => { e.preventDefault(); location.hash = `records/${file}/${recordInput.value}`; }}, recordInput, el("button", {text: "go to record"})),
    el("form", {onsubmit: (e) => { e.preventDefault(); jumpOffset().catch((err) => { status.textContent = err.message; }); }}, offsetInput, el("button", {text: "go to byte"})),
    state(shard), status);
  const note = el("p", {id: "no-jump", class: "more"});
  const heading = el("h2", {id: "range"});
  const settle = (shard) => { // what the file's index allows, kept up to date while it loads or builds
    files.files[file] = shard;
    total = shard.records;
    const count = total === null ? "" : ` of ${total.toLocaleString("en")}`;
    heading.textContent = page.records.length
      ? `records ${page.records[0].number}–${page.records[page.records.length - 1].number}${count}` : `no records here${count}`;
    controls.querySelector(".state").replaceWith(state(shard));
    note.replaceChildren(shard.no_jump ? `Jumps: ${shard.no_jump}. ` : "");
    if (shard.state === "unindexed") {
      note.append(el("button", {id: "build-index", text: `build the index (reads up to ${bytes(shard.size)})`,
        onclick: () => getJSON("/api/index", {file}).then((all) => { files = all; settle(all.files[file]); })}));
    }
    if (UNSETTLED.includes(shard.state)) {
      later(async () => {
        if (view.dataset.page !== `${file}/${start}`) return;
        files = await getJSON("/api/files");
        if (page.pending && files.files[file].state === "ready") showRecords(file, start);
        else settle(files.files[file]);
      }, 500);
    }
  };
  const list = el("div", {id: "records"}, ...page.records.map((r) => recordCard(file, r, r.number === start)));
  if (page.pending) {
    list.append(el("p", {id: "pending", text: shard.state === "unindexed"
      ? "this page is past the records read from the start: build the index to see it" : "waiting for the index of this file…"}));
  }
  view.replaceChildren(controls, note, heading, list);
  view.dataset.page = `${file}/${start}`;
  settle(shard);
}

async function showSchema() {
  const schema = await getJSON("/api/schema");
  const table = (title, rows) => el("div", {}, el("h3", {text: title}), el("table", {class: "schema"},
    el("tr", {}, ...["feature", "spec", "detail", "note"].map((h) => el("th", {text: h}))),
    ...rows.map((r) => el("tr", {"data-key": r.key}, el("td", {text: r.key}), el("td", {text: r.spec}),
      el("td", {text: r.detail + (r.steps ? ` (steps ${r.steps[0]}–${r.steps[1]})` : "")}), el("td", {text: r.note})))));
  const parts = [el("h2", {text: `Schema (from ${schema.records} records)`}), ...schema.warnings.map((w) => el("p", {class: "error", text: w}))];
  parts.push(table(schema.feature_lists ? "context features" : "features", schema.features));
  if (schema.feature_lists) parts.push(table("feature lists (SequenceExample)", schema.feature_lists));
  parts.push(el("h3", {text: "spec as code"}), el("pre", {text: schema.code + (schema.sequence_code ? `\n\nsequence_spec = ${schema.sequence_code}` : "")}));
  for (const tfds of schema.tfds) {
    parts.push(el("h3", {text: `TFDS ${tfds.name} ${tfds.version}`}),
      el("p", {text: Object.entries(tfds.splits).map(([s, n]) => `${s}: ${n} records`).join(", ")}),
      el("pre", {class: "tfds-features", text: JSON.stringify(tfds.features, null, 2)}));
  }
  view.replaceChildren(...parts);
}

function bars(counts) {
  const top = Math.max(...counts, 1);
  const bar = (c) => {
    const node = el("div", {title: String(c)});
    node.style.height = `${Math.round((40 * c) / top)}px`; // through the CSSOM: the page's CSP refuses style attributes
    return node;
  };
  return el("div", {class: "bars"}, ...counts.map(bar));
}

async function showStatistics() {
  const stats = await getJSON("/api/statistics");
  const rows = stats.features.map((f) => el("tr", {"data-key": f.key}, el("td", {text: f.key}), el("td", {text: f.kind}),
    el("td", {class: "present", text: `${f.present} (${Math.round((100 * f.present) / Math.max(stats.records, 1))}%)`}),
    el("td", {text: f.lengths.min === f.lengths.max ? String(f.lengths.min) : `${f.lengths.min}–${f.lengths.max}`}),
    el("td", {}, f.numbers ? el("div", {}, bars(f.numbers.histogram.counts), el("span", {class: "kind", text: `${f.numbers.min} … ${f.numbers.max}, mean ${f.numbers.mean.toPrecision(4)}`})) : (f.images ? `${f.images} images` : "")),
    el("td", {class: "top"}, ...f.top.map(([v, n]) => el("div", {}, el("a", {href: `#search/${encodeURIComponent(`${f.key} == ${typeof v === "string" ? JSON.stringify(v) : shown(v)}`)}`, text: shown(v)}), ` ×${n}`)),
      f.approximate ? el("span", {class: "more", text: "(approximate)"}) : null)));
  view.replaceChildren(el("h2", {}, `Statistics of ${stats.records.toLocaleString("en")} records `,
    el("span", {id: "stats-state", class: stats.partial ? "badge partial" : "badge", text: stats.partial ? "partial: still counting" : "complete"})),
  el("table", {id: "statistics"}, el("tr", {}, ...["feature", "type", "present", "length", "numbers", "top values"].map((h) => el("th", {text: h}))), ...rows));
  if (stats.partial) later(() => { if (location.hash.startsWith("#statistics")) showStatistics(); }, 1000);
}

async function showSearch(text) {
  const input = el("input", {id: "query", size: "50", placeholder: "label in [1, 7] and not text ~ dog    (or words to find)"});
  input.value = text;
  const results = el("ol", {id: "matches"});
  const info = el("p", {id: "search-state"});
  const form = el("form", {onsubmit: (e) => { e.preventDefault(); location.hash = `search/${encodeURIComponent(input.value)}`; }}, input, el("button", {text: "filter"}));
  const saved = el("span", {id: "selection-state"});
  const save = el("button", {id: "save-selection", type: "button", text: "save matches as a selection", onclick: () => saveSelection(text, saved)});
  view.replaceChildren(el("h2", {text: "Filter and search"}), form, info, results);
  if (!text) return;
  form.append(save, saved);
  let next = [0, 0], found = 0, scanned = 0, skipped = 0;
  const more = async () => {
    const answer = await getJSON("/api/search", {q: text, file: next[0], start: next[1]});
    for (const m of answer.matches) {
      results.append(el("li", {}, el("a", {href: `#records/${m.file}/${m.record}`, text: `${files.files[m.file].path} #${m.record}`}), ` ${m.summary}`));
    }
    found += answer.matches.length; scanned += answer.scanned; skipped += answer.skipped || 0; next = answer.next;
    const large = skipped ? ` (${skipped} too large to search)` : "";
    info.textContent = `${found} match(es) in ${scanned} records read${large}` + (next ? " — searching on" : " — done");
    if (next && found < 200 && location.hash === `#search/${encodeURIComponent(text)}`) later(more, answer.pending ? 400 : 0);
  };
  await more().catch((e) => { info.textContent = `Error: ${e.message}`; info.className = "error"; });
}

// Every file scanned on the server for the filter's matches, saved as a .ttsel file (a dataset's select=).
async function saveSelection(text, state) {
  state.textContent = " scanning every record…";
  state.className = "";
  try {
    const response = await fetch(api("/api/selection", {q: text}));
    if (!response.ok) throw new Error((await response.json()).error || response.statusText);
    const link = el("a", {href: URL.createObjectURL(await response.blob()), download: "selection.ttsel"});
    document.body.append(link);
    link.click();
    link.remove();
    state.textContent = " saved selection.ttsel";
  } catch (e) {
    state.textContent = ` ${e.message}`;
    state.className = "error";
  }
}

window.addEventListener("hashchange", route);
route();
