// One entry in the browser's history per action of the reader (app.py injects this once per page load).
// Streamlit pushes a history entry for every change of the URL it is sent: a page switch pushes the new page's
// path and then the page writes its controls into the query, and the app's first run writes them too, so Back
// seemed to do nothing once after each. Here an entry is pushed only for the first URL change after an input of
// the reader's (a click, a key, a choice in a component such as the playback); later changes before the next
// input replace it. Back then undoes the last change (app_pages/common.py re-reads a URL the browser changed).
// The app's first write can come before this script runs (the page's first message is handled before its elements
// are drawn, on a quiet machine mostly): then it pushed an entry after the address the page was loaded at, and
// that address shows the same state. Back landing on it goes on back, instead of seeming to do nothing once (where
// the browser has the Navigation API, Chromium's; elsewhere Back stops there once, as before).
(() => {
  if (window.cemHistory) return;
  window.cemHistory = {pushed: 0, replaced: 0, early: false};      // counted for the browser tests
  const nav = window.navigation, loaded = (performance.getEntriesByType("navigation")[0] || {}).name;
  if (nav && nav.currentEntry && nav.currentEntry.index > 0) {
    const entries = nav.entries(), here = nav.currentEntry.index, before = entries[here - 1];
    const first = entries.findIndex(entry => entry.sameDocument);
    if (before && before.sameDocument && here - first === 1 && before.url === loaded && location.href !== loaded) {
      window.cemHistory.early = true;
      window.addEventListener("popstate", () => {
        if (nav.currentEntry.key === before.key) history.back();
      });
    }
  }
  let acted = false;
  const mark = () => { acted = true; };
  for (const type of ["pointerdown", "keydown"]) window.addEventListener(type, mark, true);
  window.addEventListener("message", event => {
    if (event.data && event.data.type === "streamlit:setComponentValue") acted = true;
  });
  const push = history.pushState.bind(history), replace = history.replaceState.bind(history);
  history.pushState = (state, title, url) => {
    if (acted) {
      acted = false;
      window.cemHistory.pushed += 1;
      return push(state, title, url);
    }
    window.cemHistory.replaced += 1;
    return replace(state, title, url);
  };
})();
