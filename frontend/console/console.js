// The VM console page's one script (app/src/pages/console.rs). It opens
// the console's WebSocket on pvedeck (never on Proxmox) and draws it with
// noVNC (graphical) or xterm.js (serial), both loaded only on this page.
// `window.pvedeckConsole` tells the browser tests what happened.

const root = document.getElementById("console");
const screen = document.getElementById("console-screen");
const statusLine = document.getElementById("console-status");
const buttons = {
  cad: document.getElementById("console-cad"),
  full: document.getElementById("console-full"),
  reconnect: document.getElementById("console-reconnect"),
  another: document.getElementById("console-another"),
  paste: document.getElementById("console-paste-send"),
};
const pasteText = document.getElementById("console-paste-text");
const vmid = root.dataset.vmid;
const kind = root.dataset.kind;
const state = (window.pvedeckConsole = {
  kind,
  state: "closed",
  openedAt: null,
  // The serial console's first bytes (the graphical one's first frame is
  // its canvas, which the tests read).
  firstFrameAt: null,
  closeReason: null,
  startedAt: performance.now(),
});

// X keysyms of what a paste types (RFB key events name keysyms).
const XK_RETURN = 0xff0d;
const XK_TAB = 0xff09;

let session = null; // { socket, send(text), ctrlAltDel(), close() }

function say(text) {
  statusLine.textContent = text;
}

function enable(open) {
  buttons.cad.disabled = !open || kind !== "vnc";
  buttons.full.disabled = !open;
  buttons.paste.disabled = !open;
}

function url(another) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const extra = another ? "&another=1" : "";
  return `${scheme}//${location.host}/api/vm/${vmid}/console?kind=${kind}${extra}`;
}

// The same checks as the WebSocket's, without opening one: why it was
// refused, in the server's words.
async function whyRefused() {
  try {
    const answer = await fetch(`/api/vm/${vmid}/console?kind=${kind}`, {
      credentials: "same-origin",
    });
    if (answer.ok) return null;
    return (await answer.text()) || `refused (HTTP ${answer.status})`;
  } catch (e) {
    return `pvedeck cannot be reached: ${e}`;
  }
}

function ended(reason, refusedBeforeOpen) {
  state.state = "closed";
  state.closeReason = reason;
  enable(false);
  session = null;
  say(reason);
  buttons.reconnect.hidden = false;
  buttons.another.hidden = !(refusedBeforeOpen && /already open/.test(reason));
}

function watch(socket) {
  let opened = false;
  socket.addEventListener("open", () => {
    opened = true;
    state.state = "open";
    state.openedAt = performance.now();
    buttons.reconnect.hidden = true;
    buttons.another.hidden = true;
    enable(true);
    say("Connected.");
  });
  socket.addEventListener("close", async (event) => {
    if (!opened) {
      const why = await whyRefused();
      ended(why || "The console could not be opened.", true);
      return;
    }
    const reason = event.reason || (event.code === 1000 ? "The console was closed." : `The console closed (code ${event.code}).`);
    ended(reason, false);
  });
}

async function openVnc(another) {
  const { default: RFB } = await import("/pkg/novnc/core/rfb.js");
  const socket = new WebSocket(url(another), ["binary"]);
  socket.binaryType = "arraybuffer";
  watch(socket);
  screen.replaceChildren();
  // Shared: another viewer (an admin in Proxmox's UI) is not cut off.
  const rfb = new RFB(screen, socket, { shared: true });
  rfb.scaleViewport = true;
  rfb.focusOnClick = true;
  rfb.addEventListener("connect", () => {
    rfb.focus();
  });
  return {
    socket,
    send(text) {
      for (const ch of text.replace(/\r\n/g, "\n")) {
        const code = ch.codePointAt(0);
        const keysym =
          ch === "\n" ? XK_RETURN : ch === "\t" ? XK_TAB : code < 0x100 ? code : 0x01000000 + code;
        rfb.sendKey(keysym, null);
      }
    },
    ctrlAltDel() {
      rfb.sendCtrlAltDel();
    },
    close() {
      rfb.disconnect();
    },
    focus() {
      rfb.focus();
    },
  };
}

async function openSerial(another) {
  const { Terminal } = await import("/pkg/xterm/xterm.mjs");
  const socket = new WebSocket(url(another), ["binary"]);
  socket.binaryType = "arraybuffer";
  watch(socket);
  screen.replaceChildren();
  const terminal = new Terminal({ convertEol: false, cursorBlink: true, rows: 30, cols: 100 });
  terminal.open(screen);
  const encoder = new TextEncoder();
  socket.addEventListener("message", (event) => {
    if (state.firstFrameAt === null) state.firstFrameAt = performance.now();
    terminal.write(new Uint8Array(event.data));
  });
  socket.addEventListener("close", () => terminal.options.disableStdin = true);
  terminal.onData((data) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
  });
  terminal.focus();
  return {
    socket,
    send(text) {
      if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(text.replace(/\r?\n/g, "\r")));
    },
    ctrlAltDel() {},
    close() {
      socket.close(1000);
    },
    focus() {
      terminal.focus();
    },
  };
}

async function connect(another) {
  if (session) session.close();
  state.state = "connecting";
  state.closeReason = null;
  state.firstFrameAt = null;
  say("Connecting…");
  buttons.reconnect.hidden = true;
  buttons.another.hidden = true;
  try {
    session = kind === "serial" ? await openSerial(another) : await openVnc(another);
  } catch (e) {
    ended(`The console could not start: ${e}`, false);
  }
}

buttons.cad.addEventListener("click", () => session && session.ctrlAltDel());
buttons.full.addEventListener("click", () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else screen.requestFullscreen().then(() => session && session.focus());
});
buttons.reconnect.addEventListener("click", () => connect(false));
buttons.another.addEventListener("click", () => connect(true));
buttons.paste.addEventListener("click", () => {
  if (session && pasteText.value) {
    session.send(pasteText.value);
    pasteText.value = "";
    session.focus();
  }
});

if (root.dataset.open === "true") {
  connect(false);
} else {
  state.state = "refused";
  state.closeReason = statusLine.textContent;
}
