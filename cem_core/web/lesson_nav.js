// The classroom lesson across the site's pages, as the app runs it across its pages (app_pages/lesson_mode.py):
// steps 1 to 7 on the energy page (index.html, explorer.js), step 8 on the GP study (gp.html), steps 9 and 10 inside a
// trained model (inside.html). A step is a page's address with ?lesson=k (and present=true in presentation mode);
// Next and Back past a page's own steps go to the next page's, and End, on any page, goes back to the address the
// lesson began from (kept in the tab's sessionStorage). A classic script after site-data.js: globalThis.CEMLesson.
"use strict";

(function () {
  const DATA = globalThis.CEMSiteData, BEFORE = "cem-lesson-before";

  function step(number) {                               // a step of the other pages (site_data.other_steps), or null
    return DATA.lesson_other.find((s) => s.number === number) || null;
  }

  function fileOf(number) {                             // the site's page of step `number`
    if (DATA.lesson.some((s) => s.number === number)) return DATA.lesson_files.energy;
    const s = step(number);
    return s === null ? null : s.file;
  }

  function url(number, present) {
    return `${fileOf(number)}?lesson=${number}${present ? "&present=true" : ""}`;
  }

  function problem(wanted) {                            // lesson_mode's refusal of a step that does not exist
    if (!/^[0-9]{1,4}$/.test(wanted) || !(Number(wanted) >= 1 && Number(wanted) <= DATA.lesson_total)) {
      return `The link's lesson step '${wanted}' does not exist: the lesson has steps 1 to ${DATA.lesson_total}.`;
    }
    return null;
  }

  function begin() {                                    // the lesson starts here: End comes back to this address
    try { sessionStorage.setItem(BEFORE, location.href); } catch (err) { console.warn(err); }
  }

  function end() {                                      // back to where the lesson began (the energy page without)
    let before = null;
    try {
      before = sessionStorage.getItem(BEFORE);
      sessionStorage.removeItem(BEFORE);
    } catch (err) { console.warn(err); }
    if (before === null) {
      location.href = DATA.lesson_files.energy;
      return;
    }
    const back = new URL(before);                       // as lesson_mode.end: presentation mode off
    back.searchParams.delete("present");
    back.searchParams.delete("lesson");
    location.href = back.href;
  }

  function go(number, present) {
    location.href = url(number, present);
  }

  globalThis.CEMLesson = {step, fileOf, url, problem, begin, end, go, total: DATA.lesson_total};
})();
