import { existsSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type {
  V1Container,
  V1DownwardAPIVolumeFile,
  V1KeyToPath,
  V1Pod,
  V1ServiceAccountTokenProjection,
  V1Volume,
} from "@kubernetes/client-node";
import type { Mount } from "./mounts.js";
import { expandReferences, fieldValue } from "./pod-spec.js";

/** What the volumes need from the API server, with the pod's node credentials. */
export interface VolumeApi {
  /** A Secret's or ConfigMap's data, or undefined when it does not exist. */
  read(
    kind: "Secret" | "ConfigMap",
    namespace: string,
    name: string,
  ): Promise<Record<string, Buffer> | undefined>;
  /** A token from the TokenRequest API, bound to the pod as the kubelet asks for it. */
  requestToken(request: {
    namespace: string;
    serviceAccount: string;
    audience?: string;
    expirationSeconds: number;
    pod: { name: string; uid: string };
  }): Promise<string>;
}

type Prepared = { path: string; readOnly: boolean } | { error: string };

/** The kubelet's defaults: 0644 for files, one hour (and a bit) for projected tokens. */
const DEFAULT_MODE = 0o644;
const DEFAULT_TOKEN_SECONDS = 3600;
/** pkg/kubelet/token: a token is refreshed at 80% of its lifetime, and at least daily. */
const REFRESH_FRACTION = 0.8;
const MAX_REFRESH_MS = 24 * 3600 * 1000;

/** `retry`: the kubelet keeps trying (a missing object may appear); otherwise it never works. */
class VolumeError extends Error {
  readonly retry: boolean;
  constructor(message: string, retry = false) {
    super(message);
    this.retry = retry;
  }
}

export interface PrepareOptions {
  /** The pod is being torn down: stop waiting for volumes. */
  isStopping: () => boolean;
  /** A volume could not be set up yet and will be tried again (the kubelet's FailedMount event). */
  onRetry: (message: string) => void;
  onRefreshError: (error: unknown) => void;
}

const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 8_000;

/** `metadata.labels` and `metadata.annotations` as the downward API writes them: `key="value"` lines. */
function downwardValue(pod: V1Pod, item: V1DownwardAPIVolumeFile): string {
  if (item.resourceFieldRef)
    throw new VolumeError(`resourceFieldRef (${item.path}) is not supported by the process node`);
  const fieldPath = item.fieldRef?.fieldPath ?? "";
  if (fieldPath === "metadata.labels" || fieldPath === "metadata.annotations") {
    const map = (fieldPath === "metadata.labels" ? pod.metadata?.labels : pod.metadata?.annotations) ?? {};
    return Object.keys(map)
      .sort()
      .map((key) => `${key}=${JSON.stringify(map[key])}`)
      .join("\n");
  }
  return fieldValue(pod, fieldPath);
}

interface FileToWrite {
  path: string;
  data: Buffer | string;
  mode: number;
}

/**
 * A pod's volumes, materialized under `<pod folder>/volumes/<name>` before its containers start, as
 * the kubelet's volume manager does: emptyDir, configMap, secret, downwardAPI, projected (with the
 * service-account token the ServiceAccount admission adds) and existing hostPath folders. Read once;
 * only projected tokens are refreshed. A volume that cannot be set up fails only the containers that
 * mount it.
 */
export class PodVolumes {
  readonly dir: string;
  private readonly prepared = new Map<string, Prepared>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private released = false;

  constructor(podDir: string) {
    this.dir = path.join(podDir, "volumes");
  }

  /**
   * Sets up every volume of the pod. A missing ConfigMap or Secret (kube-root-ca.crt appears a
   * moment after its namespace) or a failed API call is retried with back-off until it works or the
   * pod stops; a volume that can never work is recorded as the error its containers report.
   */
  async prepare(pod: V1Pod, api: VolumeApi, options: PrepareOptions): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    for (const volume of pod.spec?.volumes ?? []) {
      for (let delay = RETRY_FIRST_MS; ; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
        try {
          this.prepared.set(volume.name, await this.prepareVolume(pod, volume, api, options.onRefreshError));
          break;
        } catch (error) {
          const message = `MountVolume.SetUp failed for volume "${volume.name}": ${error instanceof VolumeError ? error.message : String(error)}`;
          if ((error instanceof VolumeError && !error.retry) || options.isStopping()) {
            this.prepared.set(volume.name, { error: message });
            break;
          }
          options.onRetry(message);
          await sleep(delay);
        }
      }
    }
  }

  private async prepareVolume(
    pod: V1Pod,
    volume: V1Volume,
    api: VolumeApi,
    onRefreshError: (error: unknown) => void,
  ): Promise<Prepared> {
    const target = path.join(this.dir, volume.name);
    const namespace = pod.metadata?.namespace ?? "default";
    if (volume.hostPath) {
      // This machine's folder as it is: the process node creates nothing outside its work folder.
      if (!existsSync(volume.hostPath.path))
        throw new VolumeError(`hostPath ${volume.hostPath.path} does not exist`);
      return { path: volume.hostPath.path, readOnly: false };
    }
    await mkdir(target, { recursive: true });
    if (volume.emptyDir) return { path: target, readOnly: false };
    const files: FileToWrite[] = [];
    if (volume.configMap) {
      const source = volume.configMap;
      files.push(
        ...(
          await this.objectFiles(
            api,
            "ConfigMap",
            namespace,
            source.name ?? "",
            source.items,
            source.optional,
          )
        ).map((file) => ({ ...file, mode: file.mode ?? source.defaultMode ?? DEFAULT_MODE })),
      );
    } else if (volume.secret) {
      const source = volume.secret;
      files.push(
        ...(
          await this.objectFiles(
            api,
            "Secret",
            namespace,
            source.secretName ?? "",
            source.items,
            source.optional,
          )
        ).map((file) => ({ ...file, mode: file.mode ?? source.defaultMode ?? DEFAULT_MODE })),
      );
    } else if (volume.downwardAPI) {
      const mode = volume.downwardAPI.defaultMode ?? DEFAULT_MODE;
      for (const item of volume.downwardAPI.items ?? [])
        files.push({ path: item.path, data: downwardValue(pod, item), mode: item.mode ?? mode });
    } else if (volume.projected) {
      const mode = volume.projected.defaultMode ?? DEFAULT_MODE;
      for (const source of volume.projected.sources ?? []) {
        if (source.serviceAccountToken) {
          const projection = source.serviceAccountToken;
          const token = await this.requestToken(pod, projection, api);
          files.push({ path: projection.path, data: token, mode });
          this.scheduleRefresh(
            pod,
            projection,
            api,
            path.join(target, projection.path),
            mode,
            onRefreshError,
          );
        } else if (source.configMap) {
          const ref = source.configMap;
          const found = await this.objectFiles(
            api,
            "ConfigMap",
            namespace,
            ref.name ?? "",
            ref.items,
            ref.optional,
          );
          files.push(...found.map((file) => ({ ...file, mode: file.mode ?? mode })));
        } else if (source.secret) {
          const ref = source.secret;
          const found = await this.objectFiles(
            api,
            "Secret",
            namespace,
            ref.name ?? "",
            ref.items,
            ref.optional,
          );
          files.push(...found.map((file) => ({ ...file, mode: file.mode ?? mode })));
        } else if (source.downwardAPI) {
          for (const item of source.downwardAPI.items ?? [])
            files.push({ path: item.path, data: downwardValue(pod, item), mode: item.mode ?? mode });
        } else {
          throw new VolumeError("projected source type not supported by the process node");
        }
      }
    } else {
      throw new VolumeError("volume type not supported by the process node");
    }
    for (const file of files) {
      const destination = path.join(target, file.path);
      await mkdir(path.dirname(destination), { recursive: true });
      await writeFile(destination, file.data, { mode: file.mode });
    }
    // The kubelet always mounts these read-only (CVE-2017-1002102).
    return { path: target, readOnly: true };
  }

  private async objectFiles(
    api: VolumeApi,
    kind: "Secret" | "ConfigMap",
    namespace: string,
    name: string,
    items: V1KeyToPath[] | undefined,
    optional: boolean | undefined,
  ): Promise<(Omit<FileToWrite, "mode"> & { mode?: number })[]> {
    const data = await api.read(kind, namespace, name);
    if (!data) {
      if (optional) return [];
      throw new VolumeError(`${kind.toLowerCase()} "${name}" not found`, true);
    }
    if (!items) return Object.entries(data).map(([key, value]) => ({ path: key, data: value }));
    const files: (Omit<FileToWrite, "mode"> & { mode?: number })[] = [];
    for (const item of items) {
      const value = data[item.key];
      if (value === undefined) {
        if (optional) continue;
        throw new VolumeError(`${kind.toLowerCase()} references non-existent config key: ${item.key}`, true);
      }
      files.push({ path: item.path, data: value, mode: item.mode });
    }
    return files;
  }

  private requestToken(
    pod: V1Pod,
    projection: V1ServiceAccountTokenProjection,
    api: VolumeApi,
  ): Promise<string> {
    return api.requestToken({
      namespace: pod.metadata?.namespace ?? "default",
      serviceAccount: pod.spec?.serviceAccountName ?? "default",
      ...(projection.audience ? { audience: projection.audience } : {}),
      expirationSeconds: projection.expirationSeconds ?? DEFAULT_TOKEN_SECONDS,
      pod: { name: pod.metadata?.name ?? "", uid: pod.metadata?.uid ?? "" },
    });
  }

  private scheduleRefresh(
    pod: V1Pod,
    projection: V1ServiceAccountTokenProjection,
    api: VolumeApi,
    file: string,
    mode: number,
    onError: (error: unknown) => void,
  ): void {
    const seconds = projection.expirationSeconds ?? DEFAULT_TOKEN_SECONDS;
    const delay = Math.min(seconds * 1000 * REFRESH_FRACTION, MAX_REFRESH_MS);
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (this.released) return;
      void (async () => {
        const token = await this.requestToken(pod, projection, api);
        if (this.released) return;
        // Renamed into place: a reader sees the old token or the new one, never half of one.
        const staged = path.join(path.dirname(file), `..${path.basename(file)}.new`);
        await writeFile(staged, token, { mode });
        await rename(staged, file);
      })()
        .catch(onError)
        .finally(() => {
          if (!this.released) this.scheduleRefresh(pod, projection, api, file, mode, onError);
        });
    }, delay);
    timer.unref();
    this.timers.add(timer);
  }

  /** The container's volumeMounts as bind mounts, or the StartError message when one cannot be made. */
  async mountsFor(container: V1Container, env: Record<string, string>): Promise<Mount[] | { error: string }> {
    const mounts: Mount[] = [];
    for (const volumeMount of container.volumeMounts ?? []) {
      const volume = this.prepared.get(volumeMount.name);
      if (!volume) return { error: `volume "${volumeMount.name}" is not defined in the pod` };
      if ("error" in volume) return volume;
      const subPath = volumeMount.subPathExpr
        ? expandReferences(volumeMount.subPathExpr, env)
        : (volumeMount.subPath ?? "");
      const source = path.join(volume.path, subPath);
      if (path.relative(volume.path, source).startsWith("..")) {
        return { error: `subPath ${subPath} of volume "${volumeMount.name}" leaves the volume` };
      }
      // The kubelet creates a missing subPath folder inside the volume; never outside the pod's folder.
      if (!existsSync(source)) {
        if (!source.startsWith(`${this.dir}/`)) return { error: `subPath ${source} does not exist` };
        await mkdir(source, { recursive: true });
      }
      mounts.push({
        source,
        target: volumeMount.mountPath,
        readOnly: volumeMount.readOnly === true || volume.readOnly,
      });
    }
    return mounts;
  }

  /** Stops token refreshes and removes what was written (tokens, secrets, emptyDir contents). */
  async release(): Promise<void> {
    this.released = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    await rm(this.dir, { recursive: true, force: true });
  }
}
