// A small JSON client over kept-alive HTTPS for the benchmark's own requests (thousands of
// creates), and a watch that records when this process first saw each state of an object.
import https from "node:https";
import { createInterface } from "node:readline";
import { KubeConfig } from "@kubernetes/client-node";

export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export class Api {
  private readonly server: string;
  private readonly agent: https.Agent;
  private tls: https.RequestOptions = {};
  readonly kubeConfig: KubeConfig;

  private constructor(kubeConfig: KubeConfig) {
    this.kubeConfig = kubeConfig;
    const server = kubeConfig.getCurrentCluster()?.server;
    if (!server) throw new Error("kubeconfig names no cluster");
    this.server = server;
    this.agent = new https.Agent({ keepAlive: true, maxSockets: 32 });
  }

  static async fromFile(file: string): Promise<Api> {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(file);
    const api = new Api(kubeConfig);
    await kubeConfig.applyToHTTPSOptions(api.tls);
    return api;
  }

  close(): void {
    this.agent.destroy();
  }

  request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    contentType = "application/json",
  ): Promise<T> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const request = https.request(
        new URL(this.server + path),
        {
          ...this.tls,
          agent: this.agent,
          method,
          // The kubeconfig's own headers (a bearer token) with the body's.
          headers: {
            ...(this.tls.headers as Record<string, string> | undefined),
            ...(payload ? { "content-type": contentType, "content-length": Buffer.byteLength(payload) } : {}),
          },
          timeout: 60_000,
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            const status = response.statusCode ?? 0;
            if (status >= 300)
              reject(new ApiError(status, `${method} ${path}: HTTP ${status} ${text.slice(0, 300)}`));
            else resolve((text ? JSON.parse(text) : undefined) as T);
          });
          response.on("error", reject);
        },
      );
      request.on("timeout", () => request.destroy(new Error(`${method} ${path}: timed out`)));
      request.on("error", reject);
      request.end(payload);
    });
  }

  /** Lines of a watch until the signal aborts or the server ends it. */
  async watchLines(path: string, signal: AbortSignal, onLine: (line: string) => void): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const request = https.request(
        new URL(this.server + path),
        { ...this.tls, method: "GET", signal },
        (response) => {
          response.on("error", reject);
          if (response.statusCode !== 200) {
            response.resume();
            reject(new ApiError(response.statusCode ?? 0, `watch ${path}: HTTP ${response.statusCode}`));
            return;
          }
          const lines = createInterface({ input: response, crlfDelay: Number.POSITIVE_INFINITY });
          lines.on("error", reject);
          lines.on("line", onLine);
          lines.on("close", () => resolve());
        },
      );
      request.on("error", reject);
      request.end();
    });
  }
}

/** Runs `work` over `items`, at most `limit` at a time; rejects with the first failure. */
export async function inPool<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const runners = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const item = items[next++] as T;
      await work(item);
    }
  });
  await Promise.all(runners);
}
