// kvlib's static site (kvlib/tools/site.py): each view mounted from the state its executed notebook stored, with
// no kernel. A view's module asks its `model` what anywidget's front-end gives it in JupyterLab: get, set
// and on over the stored state. What only a kernel answers (save_changes, send: "load layer 7") cannot be
// answered here, so the view says so under itself. Each module is imported once, from a blob: URL (a page
// opened from file:// may not import a module from a file), and nothing is fetched.
//
// window.kvSite, for a live page (live.js) and the tests: remount(mount, state) draws a mounted view again over a
// new state (what it does not give, such as the view's words in the page's language, is kept), mount(mount,
// module, state) draws a view where none was, state(mount) is the state a view draws now, and drawn is a
// promise that every recorded view has drawn. A mount is the page's [data-kv-model] element (or one live.js made).
window.kvSite = (() => {
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

  const shown = new Map();  // mount -> {module, state, cleanup, done: the promise of its last drawing}

  // draw a view into its mount, after whatever drawing of that mount is under way, ending the last one's
  // listeners and timers first (its render's cleanup)
  function draw(mount, module, state) {
    const before = shown.get(mount);
    const now = { module, state };
    shown.set(mount, now);
    now.done = (before ? before.done : Promise.resolve()).then(async () => {
      before?.cleanup?.();
      const el = document.createElement("div");
      mount.replaceChildren(el);
      const { default: widget } = await load(module);
      const w = typeof widget === "function" ? await widget() : widget;
      const m = model(state, mount);
      await w.initialize?.({ model: m });
      now.cleanup = await w.render({ model: m, el });
    }).catch((err) => {
      mount.textContent = `this view did not draw: ${err}`;
      console.error(err);
    });
    return now.done;
  }

  const drawn = Promise.all([...document.querySelectorAll("[data-kv-model]")].map((mount) => {
    const view = views[mount.dataset.kvModel];
    return draw(mount, view.module, view.state);
  }));
  return {
    remount: (mount, state) => draw(mount, shown.get(mount).module, { ...shown.get(mount).state, ...state }),
    mount: (mount, module, state) => draw(mount, module, state),
    state: (mount) => shown.get(mount)?.state,
    drawn,
  };
})();
