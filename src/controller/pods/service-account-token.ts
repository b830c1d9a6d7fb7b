// The service account's token reaches the task containers only (issue 33 item 3). The pod sets
// automountServiceAccountToken: false, so the API server's ServiceAccount admission adds its
// token volume to no container, and the pod carries a projected volume of its own, made as that
// admission makes `kube-api-access-*` (a bound token, the cluster's CA, the namespace), mounted
// read-only where clients look for it in each task container. The runner never holds a token:
// it reads its plan from a file and writes its report to its termination message, and no task
// runs in its container in any layout (docs/design.md, "The service account's token").
import type { PodManifest } from "./pod-builder.js";

export const SERVICE_ACCOUNT_TOKEN_VOLUME = "serviceaccount-token";
/** Where client libraries (client-go's rest.InClusterConfig, kubectl) look for the token. */
export const SERVICE_ACCOUNT_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
/**
 * The token's life: an hour, renewed by the kubelet at 80 % of it. Not admission's 3607, which
 * an API server run with --service-account-extend-token-expiration stretches to a year.
 */
export const SERVICE_ACCOUNT_TOKEN_SECONDS = 3600;

/** The projected volume, as ServiceAccount admission makes `kube-api-access-*`. */
export function serviceAccountTokenVolume(): Record<string, unknown> {
  return {
    name: SERVICE_ACCOUNT_TOKEN_VOLUME,
    projected: {
      defaultMode: 0o644,
      sources: [
        { serviceAccountToken: { path: "token", expirationSeconds: SERVICE_ACCOUNT_TOKEN_SECONDS } },
        { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
        {
          downwardAPI: {
            items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }],
          },
        },
      ],
    },
  };
}

export function serviceAccountTokenMount(): Record<string, unknown> {
  return { name: SERVICE_ACCOUNT_TOKEN_VOLUME, mountPath: SERVICE_ACCOUNT_TOKEN_DIR, readOnly: true };
}

/** The service account whose token the pod mounts in its task containers, if it mounts one. */
export function podServiceAccountToken(pod: PodManifest): string | undefined {
  const volumes = (pod.spec.volumes ?? []) as { name?: string }[];
  if (!volumes.some((v) => v.name === SERVICE_ACCOUNT_TOKEN_VOLUME)) return undefined;
  const name = pod.spec.serviceAccountName;
  return typeof name === "string" ? name : undefined;
}

/**
 * The pod without the token: its service account says automountServiceAccountToken: false, which
 * the pod's own projected volume would otherwise bypass. A copy; `pod` is not changed.
 */
export function withoutServiceAccountToken(pod: PodManifest): PodManifest {
  const spec = structuredClone(pod.spec);
  const volumes = (spec.volumes ?? []) as { name?: string }[];
  spec.volumes = volumes.filter((v) => v.name !== SERVICE_ACCOUNT_TOKEN_VOLUME);
  for (const container of (spec.containers ?? []) as { volumeMounts?: { name?: string }[] }[]) {
    if (container.volumeMounts)
      container.volumeMounts = container.volumeMounts.filter((m) => m.name !== SERVICE_ACCOUNT_TOKEN_VOLUME);
  }
  return { ...pod, spec };
}
