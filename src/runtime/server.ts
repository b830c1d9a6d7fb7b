// /metrics, /healthz and /readyz on one small HTTP server.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Registry } from "prom-client";

export interface HealthServerOptions {
  host: string;
  port: number;
  registry: Registry;
  /** Live: the process is not wedged. */
  healthy: () => boolean;
  /** Ready: the caches are synced and current; otherwise the reason, in words. */
  readiness: () => { ready: boolean; reason: string };
}

export class HealthServer {
  private readonly server: Server;
  private readonly options: HealthServerOptions;

  constructor(options: HealthServerOptions) {
    this.options = options;
    this.server = createServer((request, response) => {
      const path = (request.url ?? "/").split("?")[0];
      if (request.method !== "GET" && request.method !== "HEAD") {
        response.writeHead(405).end();
        return;
      }
      if (path === "/healthz" || path === "/livez") {
        const ok = this.options.healthy();
        response.writeHead(ok ? 200 : 500, { "content-type": "text/plain" }).end(ok ? "ok\n" : "unhealthy\n");
        return;
      }
      if (path === "/readyz") {
        const { ready, reason } = this.options.readiness();
        response
          .writeHead(ready ? 200 : 503, { "content-type": "text/plain" })
          .end(ready ? "ok\n" : `not ready: ${reason}\n`);
        return;
      }
      if (path === "/metrics") {
        this.options.registry.metrics().then(
          (text) => response.writeHead(200, { "content-type": this.options.registry.contentType }).end(text),
          (error: unknown) => response.writeHead(500).end(String(error)),
        );
        return;
      }
      response.writeHead(404).end();
    });
  }

  listen(): Promise<AddressInfo> {
    return listenOn(this.server, this.options);
  }

  close(): Promise<void> {
    return closeNow(this.server);
  }
}

/** Listens on the address; resolves with the one bound (port 0: the kernel's choice). */
export function listenOn(server: Server, address: { host: string; port: number }): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(address.port, address.host, () => resolve(server.address() as AddressInfo));
  });
}

/** Stops listening and ends the open connections (a watch or a stream would hold close for ever). */
export function closeNow(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
