// A byte relay between this machine's network namespace and the real node's, through Unix
// sockets in the node's folder (a path both namespaces see): the node's namespace has no link to
// this machine's at all, so nothing it sends can be routed anywhere else.
//
// Run twice, once in each namespace:
//   node relay.js --ready FILE --forward LISTEN=TARGET [--forward ...]
// LISTEN and TARGET are `tcp:HOST:PORT` or `unix:PATH`. Every connection accepted on LISTEN is
// joined to a new connection to TARGET, both ways, until either side closes. FILE is written once
// every LISTEN is bound.
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

function parseArgs(argv: string[]): { ready: string; forwards: { listen: Endpoint; target: Endpoint }[] } {
  let ready = "";
  const forwards: { listen: Endpoint; target: Endpoint }[] = [];
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
    } else throw new Error(`unknown argument ${String(arg)} (only --ready FILE and --forward LISTEN=TARGET)`);
  }
  if (ready === "" || forwards.length === 0)
    throw new Error("--ready FILE and at least one --forward are required");
  return { ready, forwards };
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

async function listen(listenOn: Endpoint, target: Endpoint): Promise<void> {
  const server = net.createServer({ allowHalfOpen: true }, (client) => join(client, target));
  if (listenOn.kind === "unix") await rm(listenOn.path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (listenOn.kind === "tcp") server.listen({ host: listenOn.host, port: listenOn.port }, resolve);
    else server.listen({ path: listenOn.path }, resolve);
  });
  server.on("error", (error) => process.stderr.write(`relay: ${describe(listenOn)}: ${error.message}\n`));
}

const { ready, forwards } = parseArgs(process.argv.slice(2));
for (const { listen: listenOn, target } of forwards) await listen(listenOn, target);
writeFileSync(ready, `${forwards.map((f) => `${describe(f.listen)} -> ${describe(f.target)}`).join("\n")}\n`);
for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => process.exit(0));
