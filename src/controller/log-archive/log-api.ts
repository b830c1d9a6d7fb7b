// The log API: archived logs served to the API server as the aggregated group logs.playbook.dev
// (as metrics-server serves metrics.k8s.io), so that reading one takes a Kubernetes permission
// the API server checks (`get playbooklogs/log`) and the store's credentials never leave the
// controller. One verb on one resource and its `log` subresource:
//   GET /apis/logs.playbook.dev/v1alpha1/namespaces/NS/playbooklogs/NAME
// answers a PlaybookLog object listing the run's archived attempts (playbook-log-object.ts);
//   GET /apis/logs.playbook.dev/v1alpha1/namespaces/NS/playbooklogs/NAME/log[?attempt=K]
// answers the attempt's archived log as text/plain (default: the latest attempt archived), its
// attempt in X-Playbook-Log-Attempt. The API server counts a `log` subresource as long-running
// (as pods/log), so its request timeout does not cut a slow read of a big log. Discovery (/apis,
// the group, the version) makes the APIService Available. Who may call: log-api-access.ts.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { pipeline } from "node:stream/promises";
import type { TLSSocket } from "node:tls";
import type { Logger } from "pino";
import { z } from "zod";
import {
  LOG_API_ATTEMPT_HEADER,
  LOG_API_GROUP,
  LOG_API_RESOURCE,
  LOG_API_SUBRESOURCE,
  LOG_API_VERSION,
} from "../../api/log-archive.js";
import { GROUP, PLURAL, VERSION } from "../../api/playbook.js";
import type { ApiClient } from "../../runtime/api-client.js";
import { statusCodeOf } from "../../runtime/api-errors.js";
import { closeNow, listenOn } from "../../runtime/server.js";
import { parseAddress } from "../config.js";
import { attemptLogKey, type RunIdentity } from "./archive-keys.js";
import type { ArchiveStore } from "./archive-store.js";
import {
  mayGetPlaybookLog,
  type RemoteUser,
  type RequestHeaderSettings,
  readRequestHeaderSettings,
  remoteUserOf,
} from "./log-api-access.js";
import { archivedAttempts, LOG_API_KIND, playbookLogObject } from "./playbook-log-object.js";
import { selfSignedCertificate } from "./self-signed.js";

export { LOG_API_KIND };
/** What the log API's own refusal says, apart from the API server's. */
export const REFUSED_BY_LOG_API = "refused by the log API's SubjectAccessReview";

const GROUP_VERSION = `${LOG_API_GROUP}/${LOG_API_VERSION}`;
const API_GROUP = {
  name: LOG_API_GROUP,
  versions: [{ groupVersion: GROUP_VERSION, version: LOG_API_VERSION }],
  preferredVersion: { groupVersion: GROUP_VERSION, version: LOG_API_VERSION },
};
const DISCOVERY: Record<string, object> = {
  "/apis": { kind: "APIGroupList", apiVersion: "v1", groups: [API_GROUP] },
  [`/apis/${LOG_API_GROUP}`]: { kind: "APIGroup", apiVersion: "v1", ...API_GROUP },
  [`/apis/${GROUP_VERSION}`]: {
    kind: "APIResourceList",
    apiVersion: "v1",
    groupVersion: GROUP_VERSION,
    resources: [
      {
        name: LOG_API_RESOURCE,
        singularName: "playbooklog",
        namespaced: true,
        kind: LOG_API_KIND,
        verbs: ["get"],
      },
      // As the API server lists pods/log.
      {
        name: `${LOG_API_RESOURCE}/${LOG_API_SUBRESOURCE}`,
        singularName: "",
        namespaced: true,
        kind: LOG_API_KIND,
        verbs: ["get"],
      },
    ],
  },
};
const LOG_PATH = new RegExp(
  `^/apis/${LOG_API_GROUP.replaceAll(".", "\\.")}/${LOG_API_VERSION}/namespaces/([^/]+)/${LOG_API_RESOURCE}/([^/]+)(?:/([^/]+))?$`,
);
/** Only `attempt` is read: other parameters the API server passes on (timeout) are accepted. */
const AttemptQuery = z.object({ attempt: z.coerce.number().int().min(1).max(10_000).optional() });
const StoredPlaybookIdentity = z.looseObject({
  metadata: z.looseObject({ uid: z.string().min(1), creationTimestamp: z.string().optional() }),
});
/** How often the API server's front-proxy CA and names are read again (they rotate). */
const REQUEST_HEADER_REFRESH_MS = 5 * 60_000;

export interface LogApiOptions {
  host: string;
  port: number;
  /** PEM serving certificate and key. */
  tls: { cert: string; key: string };
  requestHeader: RequestHeaderSettings;
  store: ArchiveStore;
  api: ApiClient;
  log: Logger;
  /** The Playbook from the controller's cache by `namespace/name`; undefined: not cached (read from the API). */
  cached?:
    | ((
        key: string,
      ) => { metadata: { uid?: string | undefined; creationTimestamp?: string | undefined } } | undefined)
    | undefined;
}

/** A Kubernetes Status, as the API server answers an error. */
function status(code: number, reason: string, message: string, details?: object): object {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
    details,
  };
}

const REASONS: Record<number, string> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  503: "ServiceUnavailable",
};

class Refusal extends Error {
  readonly code: number;
  /** The object refused or not found, as a Status's details name it. */
  readonly object: string | undefined;

  constructor(code: number, message: string, object?: string) {
    super(message);
    this.code = code;
    this.object = object;
  }
}

export class LogApiServer {
  private readonly server: Server;
  private readonly options: LogApiOptions;
  private requestHeader: RequestHeaderSettings;
  private refresh: NodeJS.Timeout | undefined;

  constructor(options: LogApiOptions) {
    this.options = options;
    this.requestHeader = options.requestHeader;
    this.server = createServer(this.tlsOptions(), (request, response) => {
      this.serve(request, response).catch((error: unknown) => this.fail(response, error));
    });
  }

  private tlsOptions() {
    return {
      cert: this.options.tls.cert,
      key: this.options.tls.key,
      // Any client may connect (the health probes); only a front-proxy certificate the
      // requestheader CA signed is believed (log-api-access.ts).
      ca: this.requestHeader.clientCa,
      requestCert: true,
      rejectUnauthorized: false,
    };
  }

  /** The API server's front-proxy settings changed (its CA rotated): new connections take them. */
  updateRequestHeader(settings: RequestHeaderSettings): void {
    this.requestHeader = settings;
    this.server.setSecureContext(this.tlsOptions());
  }

  /** Reads the front-proxy settings again every `intervalMs`, until close. */
  refreshEvery(intervalMs: number): void {
    this.refresh = setInterval(() => {
      readRequestHeaderSettings(this.options.api).then(
        (settings) => {
          if (JSON.stringify(settings) !== JSON.stringify(this.requestHeader)) {
            this.updateRequestHeader(settings);
            this.options.log.info({}, "Took the API server's new front-proxy settings for the log API");
          }
        },
        (error: unknown) =>
          this.options.log.warn(
            { error: String(error) },
            "Failed to read the API server's front-proxy settings",
          ),
      );
    }, intervalMs);
    this.refresh.unref();
  }

  listen(): Promise<AddressInfo> {
    return listenOn(this.server, this.options);
  }

  close(): Promise<void> {
    clearInterval(this.refresh);
    return closeNow(this.server);
  }

  private async serve(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "https://log-api");
    if (url.pathname === "/healthz" || url.pathname === "/livez" || url.pathname === "/readyz") {
      response.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
      return;
    }
    const caller = remoteUserOf(request.socket as TLSSocket, request.headers, this.requestHeader);
    if ("refused" in caller) throw new Refusal(401, `Unauthorized: ${caller.refused}`);
    if (request.method !== "GET") throw new Refusal(405, `${request.method} is not served: only get`);
    const discovery = DISCOVERY[url.pathname.replace(/\/$/, "")];
    if (discovery) {
      json(response, 200, discovery);
      return;
    }
    const match = LOG_PATH.exec(url.pathname);
    if (!match) throw new Refusal(404, "the server could not find the requested resource");
    const namespace = decodeURIComponent(match[1] ?? "");
    const name = decodeURIComponent(match[2] ?? "");
    const subresource = match[3] === undefined ? undefined : decodeURIComponent(match[3]);
    if (subresource !== undefined && subresource !== LOG_API_SUBRESOURCE)
      throw new Refusal(
        404,
        `${LOG_API_RESOURCE}.${LOG_API_GROUP} has no subresource ${subresource}: only ${LOG_API_SUBRESOURCE}`,
      );
    const asked = url.searchParams.get("attempt");
    const query = AttemptQuery.safeParse({ attempt: asked ?? undefined });
    if (!query.success)
      throw new Refusal(400, `attempt=${asked}: must be a whole number from 1 to 10000`, name);
    await this.authorize(caller.user, { namespace, name, subresource });
    const { run, created } = await this.runOf(namespace, name);
    if (subresource === undefined)
      json(response, 200, await playbookLogObject(this.options.store, run, created));
    else await this.sendLog(response, run, query.data.attempt);
  }

  /** Defence in depth: the API server checked RBAC before proxying; the controller asks it again. */
  private async authorize(
    user: RemoteUser,
    target: { namespace: string; name: string; subresource: string | undefined },
  ): Promise<void> {
    const { namespace, name, subresource } = target;
    const { allowed, reason } = await mayGetPlaybookLog(this.options.api, user, target);
    if (allowed) return;
    const resource = subresource === undefined ? LOG_API_RESOURCE : `${LOG_API_RESOURCE}/${subresource}`;
    this.options.log.info({ user: user.name, namespace, name, resource }, "Refused an archived log");
    throw new Refusal(
      403,
      `${LOG_API_RESOURCE}.${LOG_API_GROUP} "${name}" is forbidden: User "${user.name}" cannot get resource "${resource}" in API group "${LOG_API_GROUP}" in the namespace "${namespace}" (${REFUSED_BY_LOG_API})${reason ? `: ${reason}` : ""}`,
      name,
    );
  }

  /** The run, and when its Playbook was made (the PlaybookLog's age). */
  private async runOf(namespace: string, name: string): Promise<{ run: RunIdentity; created?: string }> {
    // The cache the controller keeps of the namespaces it watches; others are read from the API.
    const cached = this.options.cached?.(`${namespace}/${name}`)?.metadata;
    if (cached?.uid) return { run: { namespace, name, uid: cached.uid }, created: cached.creationTimestamp };
    try {
      const raw = await this.options.api.call({
        method: "GET",
        path: `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
      });
      const { uid, creationTimestamp } = StoredPlaybookIdentity.parse(raw).metadata;
      return { run: { namespace, name, uid }, created: creationTimestamp };
    } catch (error) {
      // A deleted Playbook's objects went with it: there is nothing to read.
      if (statusCodeOf(error) === 404)
        throw new Refusal(404, `${PLURAL}.${GROUP} "${name}" not found in namespace "${namespace}"`, name);
      throw error;
    }
  }

  private async sendLog(
    response: ServerResponse,
    run: RunIdentity,
    asked: number | undefined,
  ): Promise<void> {
    const { store, log } = this.options;
    const attempt = asked ?? (await archivedAttempts(store, run)).at(-1);
    if (attempt === undefined)
      throw new Refusal(404, `${PLURAL}.${GROUP} "${run.name}" has no archived log yet`, run.name);
    const reading = new AbortController();
    response.on("close", () => reading.abort());
    const object = await store.getObject(attemptLogKey(store.prefix, run, attempt), reading.signal);
    if (!object)
      throw new Refusal(
        404,
        `attempt ${attempt} of ${PLURAL}.${GROUP} "${run.name}" has no archived log`,
        run.name,
      );
    log.debug(
      { namespace: run.namespace, name: run.name, attempt, bytes: object.bytes },
      "Served an archived log",
    );
    response.writeHead(200, {
      "content-type": "text/plain; charset=utf-8",
      "content-length": String(object.bytes),
      [LOG_API_ATTEMPT_HEADER]: String(attempt),
    });
    await pipeline(object.body, response).catch((error: unknown) => {
      if (!reading.signal.aborted)
        log.warn(
          { namespace: run.namespace, name: run.name, attempt, error: String(error) },
          "Failed to send an archived log",
        );
    });
  }

  private fail(response: ServerResponse, error: unknown): void {
    if (response.headersSent) {
      response.destroy();
      return;
    }
    if (error instanceof Refusal) {
      // As the API server's Status: the object named, of the group's kind; nothing otherwise.
      const details =
        error.object === undefined
          ? undefined
          : { name: error.object, group: LOG_API_GROUP, kind: LOG_API_KIND };
      json(
        response,
        error.code,
        status(error.code, REASONS[error.code] ?? "Unknown", error.message, details),
      );
      return;
    }
    this.options.log.warn({ error: String(error) }, "Failed to serve the log API");
    json(
      response,
      503,
      status(
        503,
        "ServiceUnavailable",
        `the log archive cannot be read now: ${(error as Error)?.message ?? error}`,
      ),
    );
  }
}

function json(response: ServerResponse, code: number, body: object): void {
  response.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
}

/**
 * The log API the controller's settings ask for, started: its certificate from the files given
 * (or self-signed), the aggregation layer's settings from the API server. Undefined while the
 * archive is off.
 */
export async function startLogApi(
  deps: {
    config: {
      logApiAddress: string;
      logApiCertFile?: string | undefined;
      logApiKeyFile?: string | undefined;
    };
    /** The controller's archive store; none without --log-archive-bucket. */
    store: ArchiveStore | undefined;
    api: ApiClient;
    log: Logger;
  },
  /** The controller's cache of Playbooks (LogApiOptions.cached). */
  cached?: LogApiOptions["cached"],
): Promise<LogApiServer | undefined> {
  const { config, store, api, log } = deps;
  if (store === undefined) return undefined;
  // The runs and their archiving go on without it: the log says why reading back fails.
  try {
    const tls =
      config.logApiCertFile !== undefined && config.logApiKeyFile !== undefined
        ? {
            cert: await readFile(config.logApiCertFile, "utf8"),
            key: await readFile(config.logApiKeyFile, "utf8"),
          }
        : // Valid from the real time, whatever clock the controller's decisions read.
          selfSignedCertificate(["playbook-controller-log-api", "localhost"], new Date());
    const { host, port } = parseAddress(config.logApiAddress);
    const requestHeader = await readRequestHeaderSettings(api);
    const server = new LogApiServer({ host, port, tls, requestHeader, store, api, log, cached });
    const address = await server.listen();
    server.refreshEvery(REQUEST_HEADER_REFRESH_MS);
    log.info(
      { address: `${address.address}:${address.port}`, selfSigned: config.logApiCertFile === undefined },
      "Serving the log API",
    );
    return server;
  } catch (error) {
    log.error({ error: String(error) }, "Failed to start the log API: archived logs cannot be read back");
    return undefined;
  }
}
