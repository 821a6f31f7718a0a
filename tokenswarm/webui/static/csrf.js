// Injected by tokenswarm at the top of Locust's page, before Locust's own script: every
// same-origin request the page makes with a method other than GET/HEAD carries the session's
// token (<meta name="tokenswarm-csrf">) in the X-Tokenswarm-Csrf header. The server refuses a
// state change (start, stop, reset ...) without it, so another web site cannot drive the UI.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="tokenswarm-csrf"]');
  if (!meta || !window.fetch) return;
  var token = meta.getAttribute("content");
  var HEADER = "X-Tokenswarm-Csrf";
  var plainFetch = window.fetch;

  function sameOrigin(url) {
    try { return new URL(url, window.location.href).origin === window.location.origin; } catch (e) { return false; }
  }

  window.fetch = function (input, init) {
    var isRequest = typeof Request !== "undefined" && input instanceof Request;
    var method = ((init && init.method) || (isRequest ? input.method : "GET")).toUpperCase();
    var url = isRequest ? input.url : String(input);
    if (method === "GET" || method === "HEAD" || !sameOrigin(url)) return plainFetch.apply(this, arguments);
    if (isRequest && !(init && init.headers)) {
      input = new Request(input);  // a copy whose headers may be set
      input.headers.set(HEADER, token);
      return plainFetch.call(this, input, init);
    }
    var headers = new Headers((init && init.headers) || (isRequest ? input.headers : undefined));
    headers.set(HEADER, token);
    return plainFetch.call(this, input, Object.assign({}, init || {}, { headers: headers }));
  };

  var open = XMLHttpRequest.prototype.open, send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.open = function (method, url) {
    this._tokenswarmGuard = String(method).toUpperCase() !== "GET" && sameOrigin(url);
    return open.apply(this, arguments);
  };
  XMLHttpRequest.prototype.send = function () {
    if (this._tokenswarmGuard) this.setRequestHeader(HEADER, token);
    return send.apply(this, arguments);
  };
})();
