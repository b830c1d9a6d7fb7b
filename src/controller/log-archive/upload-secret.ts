// The Secret that hands a runner its upload plan (src/api/log-upload.ts): made before its pod, from
// the Playbook the pod is built for, never from what a pod wrote; owned by the Playbook, so it
// goes with it; removed once the attempt's log is composed. Its URLs PUT the attempt's own
// segments and nothing else, and expire an hour after the run's ceiling.
import type { Logger } from "pino";
import type { ApiClient } from "../../runtime/api-client.js";
import { isConflict, isNotFound } from "../../runtime/api-errors.js";
import { LOG_UPLOAD_PLAN_FILE_NAME, logUploadSecretName } from "../pods/log-upload-volume.js";
import type { PodManifest } from "../pods/pod-builder.js";
import { attemptLogKey } from "./archive-keys.js";
import type { ArchiveStore } from "./archive-store.js";
import { uploadPlan } from "./upload-plan.js";

export interface LogUploadSecretsDeps {
  store: ArchiveStore;
  api: Pick<ApiClient, "call">;
  log: Logger;
}

const secretsPath = (namespace: string) => `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets`;

export class LogUploadSecrets {
  private readonly deps: LogUploadSecretsDeps;

  constructor(deps: LogUploadSecretsDeps) {
    this.deps = deps;
  }

  /** Makes the Secret of the pod about to be created, or makes it again (new URLs) when it exists. */
  async prepare(
    pod: PodManifest,
    attempt: number,
    upload: { capBytes: number; validForSeconds: number },
    signal: AbortSignal,
  ): Promise<void> {
    const namespace = pod.metadata.namespace;
    const owner = pod.metadata.ownerReferences[0];
    if (!owner) throw new Error(`pod ${pod.metadata.name} names no Playbook to upload its log for`);
    const key = attemptLogKey(
      this.deps.store.prefix,
      { namespace, name: owner.name, uid: owner.uid },
      attempt,
    );
    // The shape is kept beside the segments for the composition; a store that does not answer
    // now does not hold the pod back.
    const plan = await uploadPlan(this.deps.store, key, upload, (error) => {
      this.deps.log.warn(
        { namespace, pod: pod.metadata.name, err: String(error) },
        "Could not keep log upload shape",
      );
    });
    const name = logUploadSecretName(pod.metadata.name);
    const body = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name,
        namespace,
        labels: pod.metadata.labels,
        ownerReferences: [{ ...owner, controller: false, blockOwnerDeletion: false }],
      },
      type: "Opaque",
      stringData: { [LOG_UPLOAD_PLAN_FILE_NAME]: JSON.stringify(plan) },
    };
    const create = () =>
      this.deps.api.call({ method: "POST", path: secretsPath(namespace), body, options: { signal } });
    try {
      await create();
    } catch (error) {
      if (!isConflict(error)) throw error;
      // Left by a create of the same attempt that did not get as far as its pod.
      await this.remove(namespace, pod.metadata.name, signal);
      await create();
    }
  }

  /** The attempt's Secret goes; one already gone is no error. */
  async remove(namespace: string, podName: string, signal?: AbortSignal): Promise<void> {
    try {
      await this.deps.api.call({
        method: "DELETE",
        path: `${secretsPath(namespace)}/${encodeURIComponent(logUploadSecretName(podName))}`,
        ...(signal ? { options: { signal } } : {}),
      });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}

/** The controller's Secrets for runners that upload their own logs, when the archive is on and says so. */
export function runnerUploadsOf(
  store: ArchiveStore | undefined,
  config: { logArchiveUpload: "runner" | "follow" },
  deps: { clients: { api: Pick<ApiClient, "call"> }; log: Logger },
): LogUploadSecrets | undefined {
  if (!store || config.logArchiveUpload !== "runner") return undefined;
  return new LogUploadSecrets({ store, api: deps.clients.api, log: deps.log });
}
