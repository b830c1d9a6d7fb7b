// A reverse proxy on loopback in front of the API server that sheds load as API Priority and
// Fairness does: it answers the first requests of each kind with 429 and a Retry-After, then
// forwards them (watches stream through). Its clients speak plain HTTP to it with no
// credentials; it reaches the API server over TLS as the kubeconfig's user. It records every
// request it saw: what, when, and what it answered.
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import type net from "node:net";
import { KubeConfig } from "@kubernetes/client-node";

export interface SeenRequest {
  /** Method and path, with `?watch` for a watch: requests of one kind are throttled together. */
  kind: string;
  at: number;
  status: number;
}

export interface ThrottlingProxy {
  /** A kubeconfig with no user whose server is the proxy. */
  kubeConfig: KubeConfig;
  seen: SeenRequest[];
  close(): Promise<void>;
}

export async function startThrottlingProxy(
  through: KubeConfig,
  options: {
    /** How many requests of each kind are answered 429 before the first is forwarded. */
    times: number;
    retryAfterSeconds: number;
    /** Which kinds are throttled (all by default). */
    throttles?: (kind: string) => boolean;
  },
): Promise<ThrottlingProxy> {
  const cluster = through.getCurrentCluster();
  const user = through.getCurrentUser();
  if (!cluster?.caFile || !user?.certFile || !user.keyFile) {
    throw new Error("the kubeconfig must name CA, client certificate and key files");
  }
  const upstream = new URL(cluster.server);
  const agent = new https.Agent({
    keepAlive: true,
    ca: readFileSync(cluster.caFile),
    cert: readFileSync(user.certFile),
    key: readFileSync(user.keyFile),
  });
  const seen: SeenRequest[] = [];
  const throttledSoFar = new Map<string, number>();
  const sockets = new Set<net.Socket>();
  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://proxy");
    const kind = `${request.method} ${url.pathname}${url.searchParams.get("watch") === "true" ? "?watch" : ""}`;
    const count = throttledSoFar.get(kind) ?? 0;
    if (count < options.times && (options.throttles?.(kind) ?? true)) {
      throttledSoFar.set(kind, count + 1);
      seen.push({ kind, at: performance.now(), status: 429 });
      request.resume();
      response.writeHead(429, {
        "Content-Type": "application/json",
        "Retry-After": String(options.retryAfterSeconds),
      });
      response.end(
        JSON.stringify({
          kind: "Status",
          apiVersion: "v1",
          status: "Failure",
          message: "Too many requests, please try again later.",
          reason: "TooManyRequests",
          details: { retryAfterSeconds: options.retryAfterSeconds },
          code: 429,
        }),
      );
      return;
    }
    const headers = { ...request.headers, host: upstream.host };
    const forwarded = https.request(
      new URL(request.url ?? "/", upstream),
      { method: request.method, headers, agent },
      (answer) => {
        seen.push({ kind, at: performance.now(), status: answer.statusCode ?? 0 });
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
        response.on("close", () => answer.destroy());
      },
    );
    forwarded.on("error", () => response.destroy());
    response.on("close", () => {
      if (!response.writableFinished) forwarded.destroy();
    });
    request.pipe(forwarded);
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: "throttling-proxy", server: `http://127.0.0.1:${port}`, skipTLSVerify: false }],
    users: [{ name: "anyone" }],
    contexts: [{ name: "throttling-proxy", cluster: "throttling-proxy", user: "anyone" }],
    currentContext: "throttling-proxy",
  });
  return {
    kubeConfig,
    seen,
    async close() {
      for (const socket of sockets) socket.destroy();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
