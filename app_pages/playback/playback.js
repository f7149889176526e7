// The app's step playback: the shared drawing core (player.js, copied here from cem_core/web/ by
// app_pages/playback.py) in a Streamlit component. The server sends the figures once per state, with every step's
// updates (cem_core/ui/playback.py), so moving through the steps sends nothing to the server; a click on a line or a
// heatmap row sends the token to follow (one rerun).
"use strict";

const send = (type, payload) => window.parent.postMessage({isStreamlitMessage: true, type, ...payload}, "*");

let clicks = 0;
const player = CEMPlayer.create(document.body, {
  onPick: token => send("streamlit:setComponentValue", {value: {token, click: ++clicks}, dataType: "json"}),
});
for (const [name, node] of Object.entries(player.parts)) node.id = name;   // the tests' and benchmarks' handles
window.playback = CEMPlayer.timing;

function height() {
  send("streamlit:setFrameHeight", {height: document.documentElement.scrollHeight});
}

window.addEventListener("message", async event => {
  if (event.data && event.data.type === "streamlit:render") {
    await player.render(event.data.args);
    height();
  }
});
document.addEventListener("keydown", player.key);
window.addEventListener("resize", height);
CEMPlayer.checkVersion();
send("streamlit:componentReady", {apiVersion: 1});
