// The controller's REST client: the dozen calls it makes and its watches, each as client-node's
// generated code sends it (method, path, query, content type), on KubeConfig's settings alone,
// so the generated API classes and their ~2,700 model modules need not be loaded. Every call and
// every watch goes through one agent, with the same credentials, proxy and User-Agent.
import http from "node:http";
import https from "node:https";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import type { CoreV1Event, KubeConfig, V1Lease, V1Pod } from "@kubernetes/client-node";
import { z } from "zod";
import { ApiCredentials, type Credentials, type TlsMaterial } from "./api-credentials.js";
import { type ProxyChoice, type ProxyEnv, proxyFor } from "./api-proxy.js";

/** How long one API call may take unless it is given a shorter deadline. */
export const API_CALL_TIMEOUT_MS = 30_000;
/**
 * How long a kept-alive connection may sit idle before the client closes it: well before the API
 * server's own idle timeout (90 s) and the 60 s of common load balancers.
 */
export const IDLE_SOCKET_MS = 30_000;
/** How often a call answered 429 with Retry-After is sent again before the 429 is the answer (client-go's 10). */
export const MAX_THROTTLED_RETRIES = 10;
const USER_AGENT = "playbook-controller";
const JSON_PATCH = "application/json-patch+json";
const STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json";

/** Per-call options: the call also ends when the signal aborts (as well as at its deadline). */
export interface CallOptions {
  signal?: AbortSignal;
}

/** A call the API server answered with an error status; `code` as client-node's ApiException names it. */
export class ApiError extends Error {
  readonly code: number;
  /** The Status the server sent, parsed, or its text when it was not JSON. */
  readonly body: unknown;

  constructor(code: number, body: unknown, message: string) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.body = body;
  }
}

const StatusSchema = z.looseObject({ message: z.string().optional(), reason: z.string().optional() });

const ListSchema = z.looseObject({
  metadata: z
    .looseObject({ resourceVersion: z.string().optional(), continue: z.string().optional() })
    .optional(),
  items: z.array(z.unknown()).nullable().optional(),
});

/** One page of a list: its items, the collection's resourceVersion, and the token of the next page. */
export interface ListPage {
  items: unknown[];
  resourceVersion: string;
  continue?: string | undefined;
}

type Query = Record<string, string | number | boolean | undefined>;

interface Call {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query;
  body?: unknown;
  contentType?: string;
  options?: CallOptions | undefined;
}

const segment = encodeURIComponent;

export interface ApiClientOptions {
  /** The environment the proxy is taken from (HTTPS_PROXY, NO_PROXY...); process.env by default. */
  env?: ProxyEnv;
  idleSocketMs?: number;
}

export class ApiClient {
  readonly kubeConfig: KubeConfig;
  private readonly timeoutMs: number;
  private readonly idleSocketMs: number;
  private readonly server: URL;
  private readonly proxy: ProxyChoice | undefined;
  private readonly credentials: ApiCredentials;
  private agent: { agent: http.Agent; tls: TlsMaterial } | undefined;
  private readonly retired = new Set<http.Agent>();
  private throttled = 0;

  constructor(kubeConfig: KubeConfig, timeoutMs = API_CALL_TIMEOUT_MS, options: ApiClientOptions = {}) {
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) {
      throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
    }
    try {
      this.server = new URL(cluster.server);
    } catch {
      throw new Error(`clusters[].cluster.server ${JSON.stringify(cluster.server)} is not a URL`);
    }
    this.kubeConfig = kubeConfig;
    this.timeoutMs = timeoutMs;
    this.idleSocketMs = options.idleSocketMs ?? IDLE_SOCKET_MS;
    this.proxy = proxyFor(this.server, cluster.proxyUrl || undefined, options.env ?? process.env);
    this.credentials = new ApiCredentials(kubeConfig);
  }

  /** Answers 429 (Too Many Requests) the API server gave, whether or not the call was sent again. */
  get throttledAnswers(): number {
    return this.throttled;
  }

  readNamespacedPod(args: { name: string; namespace: string }, options?: CallOptions): Promise<unknown> {
    return this.call({ method: "GET", path: podPath(args.namespace, args.name), options });
  }

  /** A ServiceAccount, read for its automountServiceAccountToken before a pod that mounts its token. */
  readNamespacedServiceAccount(
    args: { name: string; namespace: string },
    options?: CallOptions,
  ): Promise<unknown> {
    const path = `/api/v1/namespaces/${segment(args.namespace)}/serviceaccounts/${segment(args.name)}`;
    return this.call({ method: "GET", path, options });
  }

  createNamespacedPod(args: { namespace: string; body: V1Pod | object }, options?: CallOptions) {
    return this.call({ method: "POST", path: podPath(args.namespace), body: args.body, options });
  }

  /** A JSON patch (RFC 6902) of a pod. */
  patchNamespacedPod(
    args: { name: string; namespace: string; body: { op: string; path: string; value?: unknown }[] },
    options?: CallOptions,
  ): Promise<unknown> {
    return this.call({
      method: "PATCH",
      path: podPath(args.namespace, args.name),
      body: args.body,
      contentType: JSON_PATCH,
      options,
    });
  }

  /**
   * Takes one finalizer off a pod, whatever else its list holds (a strategic merge patch's
   * $deleteFromPrimitiveList: no index to race with another finalizer's removal).
   */
  removePodFinalizer(
    args: { name: string; namespace: string; finalizer: string },
    options?: CallOptions,
  ): Promise<unknown> {
    return this.call({
      method: "PATCH",
      path: podPath(args.namespace, args.name),
      body: { metadata: { "$deleteFromPrimitiveList/finalizers": [args.finalizer] } },
      contentType: STRATEGIC_MERGE_PATCH,
      options,
    });
  }

  deleteNamespacedPod(
    args: { name: string; namespace: string; gracePeriodSeconds?: number; propagationPolicy?: string },
    options?: CallOptions,
  ): Promise<unknown> {
    return this.call({
      method: "DELETE",
      path: podPath(args.namespace, args.name),
      query: { gracePeriodSeconds: args.gracePeriodSeconds, propagationPolicy: args.propagationPolicy },
      options,
    });
  }

  createNamespacedEvent(args: { namespace: string; body: CoreV1Event }, options?: CallOptions) {
    return this.call({
      method: "POST",
      path: `/api/v1/namespaces/${segment(args.namespace)}/events`,
      body: args.body,
      options,
    });
  }

  async readNamespacedLease(args: { name: string; namespace: string }, options?: CallOptions) {
    return asLease(await this.call({ method: "GET", path: leasePath(args.namespace, args.name), options }));
  }

  async createNamespacedLease(args: { namespace: string; body: V1Lease }, options?: CallOptions) {
    return asLease(
      await this.call({ method: "POST", path: leasePath(args.namespace), body: args.body, options }),
    );
  }

  async replaceNamespacedLease(
    args: { name: string; namespace: string; body: V1Lease },
    options?: CallOptions,
  ) {
    return asLease(
      await this.call({
        method: "PUT",
        path: leasePath(args.namespace, args.name),
        body: args.body,
        options,
      }),
    );
  }

  /**
   * A container's log (GET /api/v1/namespaces/NS/pods/POD/log), its last `tailLines` lines, handed
   * to `onChunk` as they arrive (text, not JSON), within the call's deadline. No `limitBytes`: the
   * server cuts the newest lines with it, so the tail is bounded by its lines alone.
   */
  async readPodLog(
    args: { namespace: string; name: string; container: string; tailLines: number },
    onChunk: (text: string) => void,
    options?: CallOptions,
  ): Promise<void> {
    const url = this.url(`${podPath(args.namespace, args.name)}/log`, {
      container: args.container,
      tailLines: args.tailLines,
    });
    const response = await this.send("GET", url, undefined, "application/json", options?.signal, "call");
    const status = response.statusCode ?? 0;
    if (status < 200 || status >= 300) throw errorOf("GET", url, status, await readText(response));
    await new Promise<void>((resolve, reject) => {
      response.setEncoding("utf8");
      response.on("data", onChunk);
      response.on("error", reject);
      response.on("end", () => resolve());
    });
  }

  /** A container's log as bytes (pods/log; follow=true ends with the container): only the caller's signal ends it. */
  async openPodLog(
    args: { namespace: string; name: string; container: string; follow: boolean },
    options?: CallOptions,
  ): Promise<http.IncomingMessage> {
    const { namespace, name, container, follow } = args;
    const url = this.url(`${podPath(namespace, name)}/log`, { container, follow });
    const response = await this.send("GET", url, undefined, "application/json", options?.signal, "watch");
    const status = response.statusCode ?? 0;
    if (status < 200 || status >= 300) throw errorOf("GET", url, status, await readText(response));
    return response;
  }

  /** PUT of a custom object's status subresource. */
  replaceNamespacedCustomObjectStatus(
    args: { group: string; version: string; plural: string; namespace: string; name: string; body: object },
    options?: CallOptions,
  ): Promise<unknown> {
    const { group, version, plural, namespace, name } = args;
    return this.call({
      method: "PUT",
      path: `/apis/${segment(group)}/${segment(version)}/namespaces/${segment(namespace)}/${segment(plural)}/${segment(name)}/status`,
      body: args.body,
      options,
    });
  }

  /**
   * One page of the collection at `path` (e.g. /api/v1/pods): at most `limit` items, from the
   * `continue` token of the page before. A token that expired answers 410 Gone.
   */
  async listPage(
    path: string,
    args: { limit: number; continue?: string | undefined; labelSelector?: string | undefined },
    options?: CallOptions,
  ): Promise<ListPage> {
    const raw = await this.call({
      method: "GET",
      path,
      query: { labelSelector: args.labelSelector, limit: args.limit, continue: args.continue },
      options,
    });
    const parsed = ListSchema.safeParse(raw);
    if (!parsed.success) throw new Error(`GET ${path}: the answer is not a list`);
    const token = parsed.data.metadata?.continue;
    return {
      items: parsed.data.items ?? [],
      resourceVersion: parsed.data.metadata?.resourceVersion ?? "",
      ...(token ? { continue: token } : {}),
    };
  }

  /**
   * A watch of the collection at `path`: each line of the stream is handed to `onLine` as it
   * arrives; resolves when the server ends the stream, rejects with an ApiError when the server
   * refuses it (with the Status message it sent) or when the connection breaks. The stream has no
   * deadline of its own (the informer's watchdog decides when a watch went silent); the answer's
   * headers must come within the call timeout.
   */
  watch(
    path: string,
    query: Query,
    handlers: { onOpen: () => void; onLine: (line: string) => void },
    options: CallOptions & { signal: AbortSignal },
  ): Promise<void> {
    return this.streamLines(path, { ...query, watch: true }, handlers, options);
  }

  /**
   * A GET whose answer is read line by line as it comes, for as long as the server sends it: a
   * watch, or a pod's log with `follow=true` (`/api/v1/namespaces/NS/pods/POD/log`). Settles as
   * `watch` does.
   */
  async streamLines(
    path: string,
    query: Query,
    /** onOpen is handed the answer's headers (an archived log's attempt and length). */
    handlers: { onOpen: (headers: http.IncomingHttpHeaders) => void; onLine: (line: string) => void },
    options: CallOptions & { signal: AbortSignal },
  ): Promise<void> {
    const url = this.url(path, query);
    const response = await this.send("GET", url, undefined, "application/json", options.signal, "watch");
    if (response.statusCode !== 200) {
      throw errorOf("GET", url, response.statusCode ?? 0, await readText(response));
    }
    handlers.onOpen(response.headers);
    await new Promise<void>((resolve, reject) => {
      // An aborted or reset stream errors here; the first settlement wins.
      response.on("error", reject);
      const lines = createInterface({ input: response, crlfDelay: Number.POSITIVE_INFINITY });
      // readline passes the response's errors on to the interface too.
      lines.on("error", reject);
      lines.on("line", handlers.onLine);
      lines.on("close", () => resolve());
    });
  }

  /** Sends one call and resolves to its JSON answer; an error status rejects with an ApiError. */
  async call({
    method,
    path,
    query,
    body,
    contentType = "application/json",
    options,
  }: Call): Promise<unknown> {
    const url = this.url(path, query);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const response = await this.send(method, url, payload, contentType, options?.signal, "call");
    // Text in the V8 heap, not one Buffer the size of the answer: a page of a list is
    // megabytes, and malloc keeps what it once held where the garbage collector gives it back.
    const text = await readText(response);
    const status = response.statusCode ?? 0;
    if (status >= 200 && status < 300) return parseJson(text);
    throw errorOf(method, url, status, text);
  }

  /**
   * One request on the shared agent, answered (headers read) within the call timeout. A 401 drops
   * the cached credentials; when the new ones differ (a rotated token, a plugin's new
   * credential), the request is sent once more with them, as client-go does. A 429 with
   * Retry-After (API Priority and Fairness shedding load) is sent again after that many seconds,
   * at most MAX_THROTTLED_RETRIES times and only while the wait ends before the call's deadline,
   * as client-go's rest client does: the API server refused it before acting on it, so sending it
   * again is safe whatever its method.
   */
  private async send(
    method: Call["method"],
    url: URL,
    payload: string | undefined,
    contentType: string,
    callerSignal: AbortSignal | undefined,
    kind: "call" | "watch",
  ): Promise<http.IncomingMessage> {
    const deadline = new AbortController();
    const endsAt = performance.now() + this.timeoutMs;
    const timer = setTimeout(() => deadline.abort(), this.timeoutMs);
    const signal = callerSignal ? AbortSignal.any([callerSignal, deadline.signal]) : deadline.signal;
    // Say which deadline ended the call: the caller's signal, or the client's own.
    const named = (error: unknown) => {
      throw deadline.signal.aborted && !callerSignal?.aborted
        ? new Error(`${method} ${url.pathname}: no answer within ${this.timeoutMs}ms (timeout)`)
        : error;
    };
    try {
      let credentials = await this.credentials.current(signal).catch(named);
      let refreshed = false;
      for (let throttled = 0; ; ) {
        const response = await this.request(method, url, payload, contentType, signal, credentials).catch(
          named,
        );
        if (response.statusCode === 401 && !refreshed) {
          refreshed = true;
          this.credentials.refresh();
          const renewed = await this.credentials.current(signal).catch(named);
          if (!sameCredentials(renewed, credentials)) {
            response.resume();
            credentials = renewed;
            continue;
          }
        }
        if (response.statusCode === 429) {
          this.throttled++;
          const waitMs = retryAfterMs(response);
          if (
            waitMs !== undefined &&
            throttled < MAX_THROTTLED_RETRIES &&
            performance.now() + waitMs < endsAt
          ) {
            throttled++;
            response.resume();
            await sleep(waitMs, undefined, { signal }).catch(() => named(abortReason(signal)));
            continue;
          }
        }
        // A call's body must also arrive by its deadline; a watch streams for as long as it lasts.
        if (kind === "watch") clearTimeout(timer);
        else response.once("close", () => clearTimeout(timer));
        return response;
      }
    } catch (error) {
      clearTimeout(timer);
      throw error;
    }
  }

  private async request(
    method: Call["method"],
    url: URL,
    payload: string | undefined,
    contentType: string,
    signal: AbortSignal,
    credentials: Credentials,
  ): Promise<http.IncomingMessage> {
    const headers: http.OutgoingHttpHeaders = {
      ...credentials.headers,
      Accept: "application/json, */*;q=0.8",
      "Content-Type": contentType,
      "User-Agent": USER_AGENT,
    };
    if (payload !== undefined) headers["Content-Length"] = Buffer.byteLength(payload);
    const transport = url.protocol === "https:" ? https : http;
    const agent = await this.agentFor(url, credentials.tls);
    return new Promise<http.IncomingMessage>((resolve, reject) => {
      const request = transport.request(
        url,
        {
          method,
          headers,
          agent,
          ...(credentials.auth ? { auth: credentials.auth } : {}),
          // client-node's SOCKS agent takes the TLS settings from each request; the own agents
          // have them already.
          ...(this.proxy?.url.protocol.startsWith("socks") ? credentials.tls : {}),
        },
        (response) => {
          answer = response;
          response.once("close", () => signal.removeEventListener("abort", onAbort));
          resolve(response);
        },
      );
      let answer: http.IncomingMessage | undefined;
      request.on("error", reject);
      // Not the request's `signal` option: an abort after the answer was read would destroy the
      // socket already back in the agent's pool, with an error nobody listens to.
      const onAbort = () => {
        if (!answer) request.destroy(abortReason(signal));
        else if (!answer.complete) answer.destroy(abortReason(signal));
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      request.once("close", () => {
        if (!answer) signal.removeEventListener("abort", onAbort);
      });
      request.end(payload);
    });
  }

  private url(path: string, query: Query | undefined): URL {
    const url = new URL(this.server.pathname.replace(/\/+$/, "") + path, this.server);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url;
  }

  /**
   * The kept-alive agent for the current TLS settings: one per change of them (a rotated
   * certificate or CA), so every call and watch after a rotation connects with the new ones.
   * Idle sockets close after IDLE_SOCKET_MS, before the API server or a load balancer drops them
   * (a request sent on a socket the other side is closing fails).
   */
  private async agentFor(url: URL, tls: TlsMaterial): Promise<http.Agent> {
    if (this.proxy?.url.protocol.startsWith("socks")) {
      // Node's agents tunnel through HTTP proxies only: a SOCKS proxy-url keeps client-node's
      // agent, which takes the TLS settings from each request.
      const options: https.RequestOptions = {};
      await this.kubeConfig.applyToHTTPSOptions(options);
      if (options.agent instanceof http.Agent) return options.agent;
    }
    if (this.agent?.tls === tls) return this.agent.agent;
    const previous = this.agent?.agent;
    const proxy = this.proxy;
    const common = { keepAlive: true, timeout: this.idleSocketMs };
    const proxyEnv = proxy
      ? { [url.protocol === "https:" ? "HTTPS_PROXY" : "HTTP_PROXY"]: proxy.url.href }
      : undefined;
    const agent =
      url.protocol === "https:"
        ? new https.Agent({ ...common, ...tls, ...(proxyEnv ? { proxyEnv } : {}) })
        : new http.Agent({ ...common, ...(proxyEnv ? { proxyEnv } : {}) });
    this.agent = { agent, tls };
    // Calls and watches still on the old agent end on their own; its idle sockets close.
    if (previous) this.retired.add(previous);
    return agent;
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.agent?.agent.destroy();
    this.agent = undefined;
    for (const agent of this.retired) agent.destroy();
    this.retired.clear();
  }
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error("The operation was aborted");
}

/**
 * Retry-After of a 429 in milliseconds: whole seconds, as the API server sends it (client-go
 * reads only that form); undefined when absent or not a number of seconds.
 */
function retryAfterMs(response: http.IncomingMessage): number | undefined {
  const value = response.headers["retry-after"]?.trim();
  if (!value || !/^\d+$/.test(value)) return undefined;
  return Number(value) * 1000;
}

function readText(response: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    response.setEncoding("utf8");
    response.on("data", (chunk: string) => {
      text += chunk;
    });
    response.on("error", reject);
    response.on("end", () => resolve(text));
  });
}

/** The ApiError of an answer with an error status: the Status message the server sent, or its text. */
function errorOf(method: string, url: URL, status: number, text: string): ApiError {
  const parsed = parseJson(text);
  const statusBody = StatusSchema.safeParse(parsed);
  const message =
    statusBody.success && statusBody.data.message ? statusBody.data.message : text.trim().slice(0, 200);
  return new ApiError(
    status,
    parsed === undefined ? text : parsed,
    `${method} ${url.pathname}: ${status} ${message || http.STATUS_CODES[status] || ""}`.trim(),
  );
}

function sameCredentials(a: Credentials, b: Credentials): boolean {
  return a.headers.Authorization === b.headers.Authorization && a.tls === b.tls && a.auth === b.auth;
}

const LeaseSchema = z.looseObject({
  metadata: z.looseObject({ resourceVersion: z.string().optional() }).optional(),
  spec: z
    .looseObject({
      holderIdentity: z.string().nullable().optional(),
      leaseDurationSeconds: z.number().int().nullable().optional(),
      acquireTime: z.string().nullable().optional(),
      renewTime: z.string().nullable().optional(),
      leaseTransitions: z.number().int().nullable().optional(),
    })
    .optional(),
});

/** The Lease fields leader election decides on, checked; the rest passes through. */
function asLease(raw: unknown): V1Lease {
  const parsed = LeaseSchema.safeParse(raw);
  if (!parsed.success) throw new Error("the API server's answer is not a Lease");
  const { spec, ...rest } = parsed.data;
  const cleaned = spec
    ? Object.fromEntries(Object.entries(spec).filter(([, value]) => value !== null && value !== undefined))
    : undefined;
  return { ...rest, ...(cleaned ? { spec: cleaned } : {}) } as V1Lease;
}

function podPath(namespace: string, name?: string): string {
  return `/api/v1/namespaces/${segment(namespace)}/pods${name === undefined ? "" : `/${segment(name)}`}`;
}

function leasePath(namespace: string, name?: string): string {
  return `/apis/coordination.k8s.io/v1/namespaces/${segment(namespace)}/leases${name === undefined ? "" : `/${segment(name)}`}`;
}

function parseJson(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
