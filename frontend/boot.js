// Loads the dashboard's wasm. A file of its own, not an inline script in index.html: the
// Content-Security-Policy allows scripts of this origin only (docs/SECURITY.md).
import init from '/fleetlens.js';
init({ module_or_path: '/fleetlens_bg.wasm' });
