// The controller's REST client: the dozen calls it makes, each as client-node's generated code
// sends it (method, path, query, content type), built on KubeConfig alone (auth, TLS, exec
// plugins), so the generated API classes and their ~2,700 model modules need not be loaded.
import http from "node:http";
import https from "node:https";
import type { CoreV1Event, KubeConfig, V1Lease, V1Pod } from "@kubernetes/client-node";
import { z } from "zod";

/** How long one API call may take unless it is given a shorter deadline. */
export const API_CALL_TIMEOUT_MS = 30_000;
const USER_AGENT = "playbook-controller";
const JSON_PATCH = "application/json-patch+json";

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

export class ApiClient {
  readonly kubeConfig: KubeConfig;
  private readonly timeoutMs: number;
  private agent: { agent: http.Agent; tls: string } | undefined;

  constructor(kubeConfig: KubeConfig, timeoutMs = API_CALL_TIMEOUT_MS) {
    if (!kubeConfig.getCurrentCluster()) {
      throw new Error("no Kubernetes cluster configured: set KUBECONFIG or run in a pod");
    }
    this.kubeConfig = kubeConfig;
    this.timeoutMs = timeoutMs;
  }

  readNamespacedPod(args: { name: string; namespace: string }, options?: CallOptions): Promise<unknown> {
    return this.call({ method: "GET", path: podPath(args.namespace, args.name), options });
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
    const deadline = AbortSignal.timeout(this.timeoutMs);
    const signal = options?.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const connection = await this.connection();
    // KubeConfig sets headers as a record (Authorization, Impersonate-User).
    const headers: http.OutgoingHttpHeaders = {
      ...(connection.headers as http.OutgoingHttpHeaders | undefined),
      Accept: "application/json, */*;q=0.8",
      "Content-Type": contentType,
      "User-Agent": USER_AGENT,
    };
    if (payload !== undefined) headers["Content-Length"] = Buffer.byteLength(payload);
    const transport = url.protocol === "https:" ? https : http;
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const request = transport.request(url, { ...connection, method, headers, signal }, (response) => {
        // Text in the V8 heap, not one Buffer the size of the answer: a page of a list is
        // megabytes, and malloc keeps what it once held where the garbage collector gives it back.
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("error", reject);
        response.on("end", () => resolve({ status: response.statusCode ?? 0, text }));
      });
      request.on("error", (error) => {
        // Say which deadline ended the call: the caller's signal, or the client's own.
        if (deadline.aborted && !options?.signal?.aborted)
          reject(new Error(`${method} ${url.pathname}: no answer within ${this.timeoutMs}ms (timeout)`));
        else reject(error);
      });
      request.end(payload);
    });
    const parsed = parseJson(answer.text);
    if (answer.status >= 200 && answer.status < 300) return parsed;
    const status = StatusSchema.safeParse(parsed);
    const message = status.success && status.data.message ? status.data.message : answer.text.slice(0, 200);
    throw new ApiError(
      answer.status,
      parsed === undefined ? answer.text : parsed,
      `${method} ${url.pathname}: ${answer.status} ${message}`.trim(),
    );
  }

  private url(path: string, query: Query | undefined): URL {
    const server = this.kubeConfig.getCurrentCluster()?.server ?? "";
    const url = new URL(server.replace(/\/+$/, "") + path);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url;
  }

  /**
   * The options of one request as KubeConfig gives them (its credentials are read each time, so
   * a rotated token or an exec plugin's new one is used), on a kept-alive agent: client-node's
   * own opened a new TLS connection for every call.
   */
  private async connection(): Promise<https.RequestOptions> {
    const options: https.RequestOptions = {};
    await this.kubeConfig.applyToHTTPSOptions(options);
    // A proxy needs client-node's agent for it.
    if (this.kubeConfig.getCurrentCluster()?.proxyUrl) return options;
    const { ca, cert, key, rejectUnauthorized, servername } = options;
    const tls = JSON.stringify([ca, cert, key, rejectUnauthorized, servername].map(String));
    if (this.agent?.tls !== tls) {
      const previous = this.agent?.agent;
      const secure = this.kubeConfig.getCurrentCluster()?.server.startsWith("https:") ?? true;
      const agent = secure
        ? new https.Agent({ keepAlive: true, ca, cert, key, rejectUnauthorized, servername })
        : new http.Agent({ keepAlive: true });
      this.agent = { agent, tls };
      // Calls still on the old agent end by their deadline; then its sockets close.
      if (previous) setTimeout(() => previous.destroy(), this.timeoutMs + 1000).unref();
    }
    return { ...options, agent: this.agent.agent };
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.agent?.agent.destroy();
    this.agent = undefined;
  }
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
