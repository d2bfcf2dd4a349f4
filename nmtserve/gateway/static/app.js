// The page of `nmtserve gateway`: talks to the LibreTranslate API of the server that served it.
// No framework, no build step, nothing from elsewhere.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const AUTO = "auto";
  const KEY_STORE = "nmtserve.apiKey";
  const state = {
    languages: [],          // /languages: [{code, name, targets}]
    settings: {},           // /frontend/settings
    alternatives: 3,        // lowered to the server's limit if it refuses 3
    seq: 0,                 // the latest translation asked for; older answers are dropped
    controller: null,       // aborts the request in flight when a newer one starts
    timer: null,            // the pause in typing before translating
  };

  // -- talking to the server

  async function api(path, options = {}) {
    let response;
    try {
      response = await fetch(path, options);
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new Error(`The gateway cannot be reached (${error.message}).`);
    }
    let body = null;
    try { body = await response.json(); } catch { /* not JSON: the status says it */ }
    if (!response.ok) {
      const message = body && (body.error || body.message);
      throw new Error(message || `${response.status} ${response.statusText}`);
    }
    return body;
  }

  function apiKey() { return $("api-key").value.trim(); }

  // With "Auto Detect", the server refuses a text surely in a language it does not translate
  // from: "fr is not supported: this looks like French; this server translates from English (...)"
  // (a batch or a file says the same). Said here as a sentence, without the API's code.
  const NOT_SERVED = /is not supported: this looks like ([^;]+); this server translates from (.+?)\s*(?:\(|$)/;

  function notServed(message) {
    const m = NOT_SERVED.exec(message || "");
    return m && { language: m[1], served: m[2] };
  }

  function explain(message) {
    const m = notServed(message);
    return m ? `This looks like ${m.language}; this server translates from ${m.served}. ` +
      "To translate it anyway, choose a language under \u201cFrom\u201d." : message;
  }

  function showError(message) {
    $("error").textContent = message || "";
    $("error").hidden = !message;
  }

  // -- languages

  function nameOf(code) {
    const found = state.languages.find((l) => l.code === code);
    return found ? found.name : code;
  }

  function option(code, name) {
    const o = document.createElement("option");
    o.value = code;
    o.textContent = name;
    return o;
  }

  function fillSources() {
    const select = $("source");
    const keep = select.value || AUTO;
    select.replaceChildren(option(AUTO, "Auto Detect"));
    for (const l of state.languages) {
      if (l.targets.length) select.append(option(l.code, l.name));
    }
    select.value = [...select.options].some((o) => o.value === keep) ? keep : AUTO;
  }

  function targetsOf(source) {
    if (source !== AUTO) {
      const found = state.languages.find((l) => l.code === source);
      return found ? found.targets : [];
    }
    return [...new Set(state.languages.flatMap((l) => l.targets))].sort();
  }

  function fillTargets() {
    const select = $("target");
    const keep = select.value || (state.settings.language && state.settings.language.target.code);
    const codes = targetsOf($("source").value);
    select.replaceChildren(...codes.map((c) => option(c, nameOf(c))));
    if (codes.includes(keep)) select.value = keep;
    updateSwap();
  }

  function updateSwap() {
    const source = $("source").value;
    const target = $("target").value;
    $("swap").disabled = source === AUTO || !targetsOf(target).includes(source);
  }

  // -- translating text

  function schedule() {
    clearTimeout(state.timer);
    state.timer = setTimeout(translate, state.settings.frontendTimeout || 500);
    $("chars").textContent = charCount();
  }

  function charCount() {
    const n = $("source-text").value.length;
    const limit = state.settings.charLimit;
    return limit > 0 ? `${n} / ${limit}` : "";
  }

  async function translate() {
    clearTimeout(state.timer);
    const q = $("source-text").value;
    const seq = ++state.seq;
    if (state.controller) state.controller.abort();
    if (!q.trim()) {
      $("translation").value = "";
      showWarning("");
      showQuality("", [], []);
      showAlternatives([]);
      $("detected").textContent = "";
      $("status").textContent = "";
      showError("");
      return;
    }
    const controller = (state.controller = new AbortController());
    $("status").textContent = "Translating…";
    const terms = glossary();
    if (terms === null) return;
    const body = {
      q, source: $("source").value, target: $("target").value, format: "text",
      alternatives: state.alternatives, api_key: apiKey() || undefined,
      glossary: Object.keys(terms).length ? terms : undefined, confidence: true,
    };
    try {
      const result = await api("/translate", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body), signal: controller.signal,
      });
      if (seq !== state.seq) return;
      $("translation").value = result.translatedText;
      showWarning(result.warning || "");
      showQuality(result.translatedText, result.wordConfidence || [], result.missingWords || []);
      showAlternatives(result.alternatives || []);
      const d = result.detectedLanguage;
      $("detected").textContent = d ? `Detected: ${nameOf(d.language)} (${Math.round(d.confidence)}%)` : "";
      $("status").textContent = "";
      showError("");
    } catch (error) {
      if (error.name === "AbortError" || seq !== state.seq) return;
      const limit = /alternatives parameter must be <= (\d+)/.exec(error.message);
      if (limit && Number(limit[1]) < state.alternatives) {
        state.alternatives = Number(limit[1]);
        return translate();
      }
      $("status").textContent = "";
      const refused = notServed(error.message);
      if (refused) {  // the last translation was of another text: not shown beside this one
        $("translation").value = "";
        showWarning("");
        showQuality("", [], []);
        showAlternatives([]);
        $("detected").textContent = `Detected: ${refused.language}`;
      }
      showError(explain(error.message));
    }
  }

  // The glossary box as {source: target}; null (and the line named) when a line cannot be read.
  function glossary() {
    const terms = {};
    const lines = $("glossary").value.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim();
      if (!line) continue;
      const cut = line.includes("\t") ? line.split("\t") : line.split(" = ");
      if (cut.length !== 2 || !cut[0].trim() || !cut[1].trim()) {
        $("glossary-status").textContent = `Line ${i + 1}: write "source term = target term" (or a tab between)`;
        $("glossary-box").open = true;
        return null;
      }
      terms[cut[0].trim()] = cut[1].trim();
    }
    const count = Object.keys(terms).length;
    $("glossary-status").textContent = count ? `${count} term${count === 1 ? "" : "s"}` : "";
    return terms;
  }

  function showWarning(text) {
    // The server's check: a number of the text missing from its translation, a translation far
    // too short, or a model unsure of it. Shown with the translation, never instead of it.
    const box = $("warning");
    box.textContent = text ? `This translation ${text}. Check it before use.` : "";
    box.hidden = !text;
  }

  // The model's own confidence (nmtserve's LibreTranslate extension, confidence: true): the
  // translation again with each word under LOW_CONFIDENCE marked, and the source words no word
  // of the translation stands for named under it. Shown only when there is something to say.
  const LOW_CONFIDENCE = 0.3;  // nmtserve.confidence.LOW_CONFIDENCE
  function showQuality(text, confidences, missing) {
    const unsure = $("unsure");
    unsure.replaceChildren();
    let word = 0, marked = 0;
    for (const part of text.split(/(\s+)/)) {
      if (!part) continue;
      if (/^\s+$/.test(part)) { unsure.append(part); continue; }
      const c = confidences[word++];
      if (c !== undefined && c < LOW_CONFIDENCE) {
        const mark = document.createElement("mark");
        mark.textContent = part;
        mark.title = `The model is unsure of this word (confidence ${c.toFixed(2)})`;
        unsure.append(mark);
        marked++;
      } else {
        unsure.append(part);
      }
    }
    if (marked) unsure.prepend(`The model is unsure of the marked word${marked === 1 ? "" : "s"}: `);
    unsure.hidden = marked === 0;
    const box = $("missing");
    box.textContent = missing.length
      ? `May be missing from the translation: ${missing.map((w) => `“${w.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, "")}”`).join(", ")}`
      : "";
    box.hidden = missing.length === 0;
  }

  function showAlternatives(list) {
    const ul = $("alternatives");
    ul.replaceChildren();
    for (const text of list) {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = text;
      button.addEventListener("click", () => {
        // The chosen one becomes the translation; the one it replaces takes its place.
        const current = $("translation").value;
        $("translation").value = text;
        button.textContent = current;
        showQuality("", [], []);  // the marks were the first translation's
        $("status").textContent = "Alternative chosen";
      });
      li.append(button);
      ul.append(li);
    }
    $("alternatives-box").hidden = list.length === 0;
  }

  async function copy() {
    const text = $("translation").value;
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      $("translation").select();  // no clipboard API (e.g. plain HTTP): the old way
      document.execCommand("copy");
    }
    $("status").textContent = "Copied";
  }

  function swap() {
    const source = $("source").value;
    const target = $("target").value;
    $("source").value = target;
    fillTargets();
    $("target").value = source;
    $("source-text").value = $("translation").value;
    updateSwap();
    translate();
  }

  // -- translating a file

  async function translateFile() {
    const file = $("file").files[0];
    $("download").hidden = true;
    if (!file) {
      showError("Choose a file to translate first.");
      $("file").focus();
      return;
    }
    const form = new FormData();
    form.append("file", file);
    form.append("source", $("source").value);
    form.append("target", $("target").value);
    if (apiKey()) form.append("api_key", apiKey());
    // The server answers when the whole file is translated: the line says how long it has been.
    const started = Date.now();
    const size = file.size < 1e6 ? `${Math.max(1, Math.round(file.size / 1e3))} KB` : `${(file.size / 1e6).toFixed(1)} MB`;
    const progress = () => {
      const seconds = Math.round((Date.now() - started) / 1000);
      $("file-status").textContent = `Translating ${file.name} (${size})… ${seconds} s`;
    };
    progress();
    const timer = setInterval(progress, 1000);
    try {
      const result = await api("/translate_file", { method: "POST", body: form }).finally(() => clearInterval(timer));
      const link = $("download");
      link.href = result.translatedFileUrl;
      link.download = file.name;
      link.textContent = `Download ${file.name} (${nameOf($("target").value)})`;
      link.hidden = false;
      $("file-status").textContent = `Translated in ${Math.round((Date.now() - started) / 1000)} s.`;
      showError("");
      link.focus();
    } catch (error) {
      $("file-status").textContent = "";
      showError(explain(error.message));
    }
  }

  // -- start

  async function load() {
    try {
      const [settings, languages] = await Promise.all([api("/frontend/settings"), api("/languages")]);
      state.settings = settings;
      state.languages = languages;
      $("key-row").hidden = !settings.keyRequired;
      const formats = settings.supportedFilesFormat || [];
      $("file").accept = formats.join(",");
      $("formats").textContent = formats.join(", ");
      fillSources();
      fillTargets();
      showError("");
      if ($("source-text").value.trim()) translate();
    } catch (error) {
      showError(`${error.message} Retrying…`);
      setTimeout(load, 5000);
    }
  }

  $("api-key").value = localStorage.getItem(KEY_STORE) || "";
  $("api-key").addEventListener("change", () => localStorage.setItem(KEY_STORE, apiKey()));
  $("source-text").addEventListener("input", schedule);
  $("source-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      translate();
    }
  });
  $("translate").addEventListener("click", translate);
  $("source").addEventListener("change", () => { fillTargets(); translate(); });
  $("target").addEventListener("change", () => { updateSwap(); translate(); });
  $("swap").addEventListener("click", swap);
  $("copy").addEventListener("click", copy);
  $("translate-file").addEventListener("click", translateFile);
  load();
})();
