// The app's instant energy page: the static site's explorer (cem_core/web/explorer.js) in a Streamlit component
// (app_pages/explorer.py builds its folder; this script is its bridge.js, loaded before explorer.js). The server
// sends the kept controls and the pinned state ({values, pinned}); every change is computed and drawn here, and once
// the page has been idle for QUIET_MS the state drawn goes to the server (one rerun, which keeps it and writes the
// app's address).
"use strict";

(function () {
  const send = (type, payload) => window.parent.postMessage({isStreamlitMessage: true, type, ...payload}, "*");
  // A state as one string whatever its keys' order (the server's JSON and the page's objects), to tell a state the
  // page already holds from a new one.
  const canonical = state => JSON.stringify(state, (key, value) => value && typeof value === "object" &&
    !Array.isArray(value) ? Object.fromEntries(Object.keys(value).sort().map(k => [k, value[k]])) : value);
  const QUIET_MS = 500;                          // a state is sent once the page has been idle this long
  let held = null;                               // the state the page holds: last loaded from or sent to the server
  let reports = 0, timer = null;

  globalThis.CEMEmbed = {
    idle(values, pinned) {                       // (a change while the timer runs restarts it: keys held, typing)
      clearTimeout(timer);
      timer = setTimeout(() => {
        const state = canonical({values, pinned});
        if (state === held) return;
        held = state;
        send("streamlit:setComponentValue", {value: {values, pinned, report: ++reports}, dataType: "json"});
      }, QUIET_MS);
    },
  };

  window.addEventListener("message", event => {
    if (!event.data || event.data.type !== "streamlit:render") return;
    const {values, pinned, report} = event.data.args;
    if (report < reports) return;                // a rerun from before the server took the page's latest report:
                                                 // its state is older than the page's (a held key would go back)
    const state = canonical({values, pinned});
    if (state === held) return;                  // a rerun for a state the page sent or already shows
    clearTimeout(timer);                         // (the server's state wins over one not yet sent)
    held = state;
    CEMExplorer.load(values, pinned);
  });

  new ResizeObserver(() => send("streamlit:setFrameHeight", {height: document.documentElement.scrollHeight}))
    .observe(document.body);
  // Once every script has run (explorer.js defines CEMExplorer): then the first render can be drawn.
  document.addEventListener("DOMContentLoaded", () => send("streamlit:componentReady", {apiVersion: 1}));
})();
