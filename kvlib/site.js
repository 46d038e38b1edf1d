// kvlib's static site (kvlib/site.py): each view mounted from the state its executed notebook stored, with
// no kernel. A view's module asks its `model` what anywidget's front-end gives it in JupyterLab: get, set
// and on over the stored state. What only a kernel answers (save_changes, send: "load layer 7") cannot be
// answered here, so the view says so under itself. Each module is imported once, from a blob: URL (a page
// opened from file:// may not import a module from a file), and nothing is fetched.
(() => {
  const { modules, styles, views, asked } = JSON.parse(document.getElementById("kv-site-views").textContent);
  const imported = {};  // module key -> its import, shared by every view of that module
  const load = (key) => (imported[key] ??= import(URL.createObjectURL(new Blob([modules[key]], { type: "text/javascript" }))));
  for (const [key, css] of Object.entries(styles)) {
    const style = document.createElement("style");
    style.textContent = css;
    document.head.append(style);
  }

  function model(state, mount) {
    const listeners = {};  // "change:step" -> callbacks, as Backbone's events are named
    const ask = () => {
      if (mount.querySelector(".kv-site-live")) return;
      const note = document.createElement("div");
      note.className = "kv-site-live";
      note.textContent = asked;  // in the page's language, from site.py
      mount.append(note);
    };
    return {
      get: (name) => state[name],
      set(name, value) {
        state[name] = value;
        for (const f of listeners[`change:${name}`] || []) f();
      },
      on(events, f) { for (const e of events.split(" ")) (listeners[e] ??= []).push(f); },
      off(events, f) { for (const e of events.split(" ")) listeners[e] = (listeners[e] || []).filter((g) => g !== f); },
      save_changes: ask,
      send: ask,
    };
  }

  for (const mount of document.querySelectorAll("[data-kv-model]")) {
    const view = views[mount.dataset.kvModel];
    const el = document.createElement("div");
    mount.append(el);
    load(view.module)
      .then(async ({ default: widget }) => {
        const w = typeof widget === "function" ? await widget() : widget;
        const m = model(view.state, mount);
        await w.initialize?.({ model: m });
        await w.render({ model: m, el });
      })
      .catch((err) => {
        mount.textContent = `this view did not draw: ${err}`;
        console.error(err);
      });
  }
})();
