// A byte relay between this machine's network namespace and the real node's, through Unix
// sockets in the node's folder (a path both namespaces see): the node's namespace has no link to
// this machine's at all, so nothing it sends can be routed anywhere else.
//
// Run twice, once in each namespace:
//   node relay.js --ready FILE [--forward LISTEN=TARGET ...] [--connect-proxy LISTEN ...]
// LISTEN and TARGET are `tcp:HOST:PORT` or `unix:PATH`. Every connection accepted on a --forward
// LISTEN is joined to a new connection to TARGET, both ways, until either side closes. A
// --connect-proxy LISTEN takes HTTP CONNECT requests (the API server's egress selector sends its
// connections to nodes, pods and Services that way) and dials HOST:PORT from this process's
// namespace. FILE is written once every LISTEN is bound.
import { writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import net from "node:net";
import { z } from "zod";

const Endpoint = z.union([
  z
    .string()
    .regex(/^tcp:[0-9.]+:\d+$/)
    .transform((s) => {
      const [, host, port] = s.split(":");
      return { kind: "tcp" as const, host: host ?? "", port: Number(port) };
    }),
  z
    .string()
    .regex(/^unix:\/.+$/)
    .transform((s) => ({ kind: "unix" as const, path: s.slice("unix:".length) })),
]);
type Endpoint = z.infer<typeof Endpoint>;

interface Args {
  ready: string;
  forwards: { listen: Endpoint; target: Endpoint }[];
  connectProxies: Endpoint[];
}

function parseArgs(argv: string[]): Args {
  let ready = "";
  const forwards: { listen: Endpoint; target: Endpoint }[] = [];
  const connectProxies: Endpoint[] = [];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    const value = argv[i + 1] ?? "";
    i += 1;
    if (arg === "--ready") ready = value;
    else if (arg === "--forward") {
      const [listen, target] = value.split("=");
      const parsedListen = Endpoint.safeParse(listen);
      const parsedTarget = Endpoint.safeParse(target);
      if (!parsedListen.success || !parsedTarget.success)
        throw new Error(`--forward takes tcp:HOST:PORT|unix:PATH=tcp:HOST:PORT|unix:PATH, not ${value}`);
      forwards.push({ listen: parsedListen.data, target: parsedTarget.data });
    } else if (arg === "--connect-proxy") {
      const parsed = Endpoint.safeParse(value);
      if (!parsed.success) throw new Error(`--connect-proxy takes tcp:HOST:PORT or unix:PATH, not ${value}`);
      connectProxies.push(parsed.data);
    } else
      throw new Error(
        `unknown argument ${String(arg)} (only --ready FILE, --forward LISTEN=TARGET and --connect-proxy LISTEN)`,
      );
  }
  if (ready === "" || forwards.length + connectProxies.length === 0)
    throw new Error("--ready FILE and at least one --forward or --connect-proxy are required");
  return { ready, forwards, connectProxies };
}

const describe = (e: Endpoint): string => (e.kind === "tcp" ? `tcp:${e.host}:${e.port}` : `unix:${e.path}`);

function join(client: net.Socket, target: Endpoint): void {
  const upstream =
    target.kind === "tcp"
      ? net.connect({ host: target.host, port: target.port, allowHalfOpen: true })
      : net.connect({ path: target.path, allowHalfOpen: true });
  const close = (): void => {
    client.destroy();
    upstream.destroy();
  };
  client.on("error", close).on("close", close);
  upstream.on("error", (error) => {
    process.stderr.write(`relay: ${describe(target)}: ${error.message}\n`);
    close();
  });
  upstream.on("close", close);
  client.pipe(upstream);
  upstream.pipe(client);
}

const CONNECT = /^CONNECT ([0-9.]+|\[[0-9a-f:]+\]|[a-z0-9.-]+):(\d+) HTTP\/1\.[01]\r\n/i;

/** Reads one CONNECT request, answers 200 once HOST:PORT is dialed, then relays both ways. */
function connectProxy(client: net.Socket): void {
  let buffered = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    buffered = Buffer.concat([buffered, chunk]);
    const end = buffered.indexOf("\r\n\r\n");
    if (end < 0) {
      if (buffered.length > 8192) client.destroy();
      return;
    }
    client.off("data", onData);
    client.pause();
    const request = CONNECT.exec(buffered.subarray(0, end + 2).toString("latin1"));
    const head = buffered.subarray(end + 4);
    if (!request) {
      client.end("HTTP/1.1 405 Method Not Allowed\r\n\r\n");
      return;
    }
    const host = (request[1] ?? "").replace(/^\[|\]$/g, "");
    const port = Number(request[2]);
    const upstream = net.connect({ host, port, allowHalfOpen: true });
    let connected = false;
    const close = (): void => {
      client.destroy();
      upstream.destroy();
    };
    upstream.once("connect", () => {
      connected = true;
      client.write("HTTP/1.1 200 Connection established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.on("error", (error) => {
      process.stderr.write(`relay: CONNECT ${host}:${port}: ${error.message}\n`);
      if (!connected) client.end(`HTTP/1.1 502 Bad Gateway\r\n\r\n`);
      else close();
    });
    upstream.on("close", () => {
      if (connected) close();
    });
    client.on("error", close).on("close", close);
  };
  client.on("data", onData);
  client.on("error", () => client.destroy());
}

async function listen(listenOn: Endpoint, target: Endpoint | "connect-proxy"): Promise<void> {
  const server = net.createServer({ allowHalfOpen: true }, (client) =>
    target === "connect-proxy" ? connectProxy(client) : join(client, target),
  );
  if (listenOn.kind === "unix") await rm(listenOn.path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (listenOn.kind === "tcp") server.listen({ host: listenOn.host, port: listenOn.port }, resolve);
    else server.listen({ path: listenOn.path }, resolve);
  });
  server.on("error", (error) => process.stderr.write(`relay: ${describe(listenOn)}: ${error.message}\n`));
}

const { ready, forwards, connectProxies } = parseArgs(process.argv.slice(2));
for (const { listen: listenOn, target } of forwards) await listen(listenOn, target);
for (const listenOn of connectProxies) await listen(listenOn, "connect-proxy");
const lines = [
  ...forwards.map((f) => `${describe(f.listen)} -> ${describe(f.target)}`),
  ...connectProxies.map((l) => `${describe(l)} -> CONNECT`),
];
writeFileSync(ready, `${lines.join("\n")}\n`);
for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => process.exit(0));
