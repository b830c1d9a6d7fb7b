import { execFile } from "node:child_process";
import { createReadStream, existsSync, readFileSync, statSync } from "node:fs";
import type { ServerResponse } from "node:http";
import https from "node:https";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface ContainerLogSource {
  /** The container's log file, or undefined when the node does not know the container. */
  logFile(namespace: string, pod: string, container: string): string | undefined;
  /** True while the container may still write (for `follow`). */
  isRunning(namespace: string, pod: string, container: string): boolean;
}

function lastLines(text: string, count: number): string {
  if (count <= 0) return "";
  const lines = text.split("\n");
  const trailingNewline = lines.at(-1) === "";
  if (trailingNewline) lines.pop();
  return lines.slice(-count).join("\n") + (trailingNewline && lines.length > 0 ? "\n" : "");
}

/**
 * The one kubelet API endpoint the process node serves: GET /containerLogs/NS/POD/CONTAINER
 * (with tailLines, limitBytes and follow), so `kubectl logs` works through the apiserver. The
 * apiserver reaches it at the node's InternalIP and `daemonEndpoints.kubeletEndpoint.Port`.
 */
export async function startLogServer(
  dir: string,
  source: ContainerLogSource,
): Promise<{ port: number; close(): Promise<void> }> {
  const keyFile = path.join(dir, "kubelet.key");
  const certFile = path.join(dir, "kubelet.crt");
  if (!existsSync(certFile)) {
    // The apiserver does not verify kubelet serving certificates unless told to; self-signed will do.
    await run("openssl", [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-subj",
      "/CN=process-node",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
      "-days",
      "30",
      "-keyout",
      keyFile,
      "-out",
      certFile,
    ]);
  }
  const server = https.createServer(
    { key: readFileSync(keyFile), cert: readFileSync(certFile) },
    (request, response) => {
      const url = new URL(request.url ?? "/", "https://process-node");
      const match = /^\/containerLogs\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(url.pathname);
      if (request.method !== "GET" || !match) {
        response.writeHead(404).end("process-node serves only /containerLogs\n");
        return;
      }
      const [namespace = "", pod = "", container = ""] = match.slice(1).map(decodeURIComponent);
      const file = source.logFile(namespace, pod, container);
      if (!file || !existsSync(file)) {
        response
          .writeHead(404)
          .end(`container ${container} of pod ${namespace}/${pod} not found on this node\n`);
        return;
      }
      const tailLines = url.searchParams.get("tailLines");
      const limitBytes = Number(url.searchParams.get("limitBytes") ?? Number.POSITIVE_INFINITY);
      let text = readFileSync(file, "utf8");
      if (tailLines !== null) text = lastLines(text, Number(tailLines));
      const body = Buffer.from(text).subarray(0, Number.isFinite(limitBytes) ? limitBytes : undefined);
      response.writeHead(200, { "Content-Type": "text/plain" });
      response.write(body);
      if (url.searchParams.get("follow") !== "true") {
        response.end();
        return;
      }
      void follow(file, statSync(file).size, response, () => source.isRunning(namespace, pod, container));
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address !== "object") throw new Error("log server has no address");
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Streams what is appended to the file until the container stops or the client goes away. */
async function follow(file: string, from: number, response: ServerResponse, running: () => boolean) {
  let offset = from;
  let closed = false;
  response.on("close", () => {
    closed = true;
  });
  while (!closed) {
    const size = statSync(file).size;
    if (size > offset) {
      const chunk = await new Promise<Buffer>((resolve, reject) => {
        const parts: Buffer[] = [];
        createReadStream(file, { start: offset, end: size - 1 })
          .on("data", (part) => parts.push(Buffer.from(part)))
          .on("end", () => resolve(Buffer.concat(parts)))
          .on("error", reject);
      });
      offset = size;
      response.write(chunk);
    } else if (!running()) {
      break;
    }
    await sleep(200);
  }
  response.end();
}
