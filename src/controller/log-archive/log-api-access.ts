// Who may read an archived log through the log API (log-api.ts). The API server authenticates the
// caller and checks RBAC before it proxies a request of the aggregated group; it then shows the
// controller its front-proxy client certificate and names the caller in X-Remote-* headers. The
// controller believes those headers only from a certificate its requestheader CA signed for an
// allowed name (read, as every aggregated API server reads them, from the kube-system ConfigMap
// extension-apiserver-authentication), and asks the API server again with a SubjectAccessReview
// before it reads the store: a caller that reaches the controller some other way reads nothing.
import type { IncomingHttpHeaders } from "node:http";
import type { TLSSocket } from "node:tls";
import { z } from "zod";
import { LOG_API_GROUP, LOG_API_RESOURCE } from "../../api/log-archive.js";
import type { ApiClient, CallOptions } from "../../runtime/api-client.js";

/** The aggregation layer's settings an extension API server follows. */
export interface RequestHeaderSettings {
  /** PEM: the CA that signs the API server's front-proxy client certificate. */
  clientCa: string;
  /** Common names a front-proxy certificate may carry; empty: any the CA signed. */
  allowedNames: string[];
  usernameHeaders: string[];
  groupHeaders: string[];
  extraHeaderPrefixes: string[];
}

const JsonList = z
  .string()
  .optional()
  .transform((text, ctx) => {
    if (text === undefined || text === "") return [];
    try {
      return z.array(z.string()).parse(JSON.parse(text));
    } catch {
      ctx.addIssue({ code: "custom", message: `must be a JSON list of strings, not ${text}` });
      return z.NEVER;
    }
  });

const AuthenticationConfigMap = z.looseObject({
  data: z.looseObject({
    "requestheader-client-ca-file": z.string().min(1, "is empty: the API server has no aggregation layer"),
    "requestheader-allowed-names": JsonList,
    "requestheader-username-headers": JsonList,
    "requestheader-group-headers": JsonList,
    "requestheader-extra-headers-prefix": JsonList,
  }),
});

export const AUTHENTICATION_CONFIGMAP = {
  namespace: "kube-system",
  name: "extension-apiserver-authentication",
};

/** Reads the requestheader settings the API server published; throws naming what is missing. */
export async function readRequestHeaderSettings(
  api: ApiClient,
  options?: CallOptions,
): Promise<RequestHeaderSettings> {
  const { namespace, name } = AUTHENTICATION_CONFIGMAP;
  const raw = await api.call({
    method: "GET",
    path: `/api/v1/namespaces/${namespace}/configmaps/${name}`,
    options,
  });
  const parsed = AuthenticationConfigMap.safeParse(raw);
  if (!parsed.success)
    throw new Error(
      `ConfigMap ${namespace}/${name} has no requestheader settings (is the API server's aggregation layer on: --requestheader-client-ca-file?): ${z.prettifyError(parsed.error)}`,
    );
  const data = parsed.data.data;
  return {
    clientCa: data["requestheader-client-ca-file"],
    allowedNames: data["requestheader-allowed-names"],
    usernameHeaders: defaulted(data["requestheader-username-headers"], "X-Remote-User"),
    groupHeaders: defaulted(data["requestheader-group-headers"], "X-Remote-Group"),
    extraHeaderPrefixes: defaulted(data["requestheader-extra-headers-prefix"], "X-Remote-Extra-"),
  };
}

function defaulted(list: string[], fallback: string): string[] {
  return list.length > 0 ? list : [fallback];
}

/** The caller the API server vouched for. */
export interface RemoteUser {
  name: string;
  uid?: string | undefined;
  groups: string[];
  extra: Record<string, string[]>;
}

/**
 * The caller named in the headers, when the connection shows a front-proxy certificate the
 * requestheader CA signed (the TLS layer checked the chain) for an allowed name; otherwise why not.
 */
export function remoteUserOf(
  socket: TLSSocket,
  headers: IncomingHttpHeaders,
  settings: RequestHeaderSettings,
): { user: RemoteUser } | { refused: string } {
  if (!socket.authorized)
    return { refused: "no client certificate of the API server's front proxy (requestheader client CA)" };
  const commonName = socket.getPeerCertificate().subject?.CN;
  const name = Array.isArray(commonName) ? commonName[0] : commonName;
  if (settings.allowedNames.length > 0 && !(name !== undefined && settings.allowedNames.includes(name)))
    return { refused: `client certificate ${name ?? "(no common name)"} is not an allowed front proxy` };
  const values = (header: string): string[] => {
    const value = headers[header.toLowerCase()];
    if (value === undefined) return [];
    return (Array.isArray(value) ? value : [value]).flatMap((v) => v.split(",").map((s) => s.trim()));
  };
  const user = settings.usernameHeaders.flatMap(values)[0];
  if (!user) return { refused: "the front proxy named no user" };
  const extra: Record<string, string[]> = {};
  for (const [header, value] of Object.entries(headers)) {
    const prefix = settings.extraHeaderPrefixes.find((p) => header.startsWith(p.toLowerCase()));
    if (!prefix || value === undefined) continue;
    const key = decodeURIComponent(header.slice(prefix.length));
    extra[key] = [...(extra[key] ?? []), ...(Array.isArray(value) ? value : [value])];
  }
  const uid = values("X-Remote-Uid")[0];
  return { user: { name: user, uid, groups: settings.groupHeaders.flatMap(values), extra } };
}

const SubjectAccessReviewAnswer = z.looseObject({
  status: z
    .looseObject({
      allowed: z.boolean().optional(),
      denied: z.boolean().optional(),
      reason: z.string().optional(),
    })
    .optional(),
});

/**
 * Whether the API server lets `user` get the run's playbooklogs, or the subresource named
 * (playbooklogs/log), as the caller asked it (a SubjectAccessReview).
 */
export async function mayGetPlaybookLog(
  api: ApiClient,
  user: RemoteUser,
  target: { namespace: string; name: string; subresource?: string | undefined },
  options?: CallOptions,
): Promise<{ allowed: boolean; reason: string }> {
  const raw = await api.call({
    method: "POST",
    path: "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    body: {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SubjectAccessReview",
      spec: {
        user: user.name,
        ...(user.uid ? { uid: user.uid } : {}),
        groups: user.groups,
        extra: user.extra,
        resourceAttributes: {
          namespace: target.namespace,
          verb: "get",
          group: LOG_API_GROUP,
          resource: LOG_API_RESOURCE,
          ...(target.subresource === undefined ? {} : { subresource: target.subresource }),
          name: target.name,
        },
      },
    },
    options,
  });
  const status = SubjectAccessReviewAnswer.parse(raw).status;
  return { allowed: status?.allowed === true && status.denied !== true, reason: status?.reason ?? "" };
}
