// One entry in the browser's history per action of the reader (app.py injects this once per page load).
// Streamlit pushes a history entry for every change of the URL it is sent: a page switch pushes the new page's
// path and then the page writes its controls into the query, and the app's first run writes them too, so Back
// seemed to do nothing once after each. Here an entry is pushed only for the first URL change after an input of
// the reader's (a click, a key, a choice in a component such as the playback); later changes before the next
// input replace it. Back then undoes the last change (app_pages/common.py re-reads a URL the browser changed).
(() => {
  if (window.cemHistory) return;
  window.cemHistory = {pushed: 0, replaced: 0};      // counted for the browser tests
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
