// An application for bench/admission-plain-app.sh: Node's http server, one event loop, 1 ms of
// CPU a request, HTTP/1.1 with keep-alive. Usage: node event-loop-app.js PORT.
const http = require("http");
http
  .createServer((req, res) => {
    const start = process.hrtime.bigint();
    while (process.hrtime.bigint() - start < 1000000n) {}
    res.writeHead(200, { "content-type": "text/plain", "content-length": 3 });
    res.end("ok\n");
  })
  .listen(+process.argv[2], "127.0.0.1");
