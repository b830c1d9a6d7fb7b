// An attempt's log read back from the log archive once its pod is gone, through the aggregated API
// the controller serves (GET /apis/logs.playbook.dev/v1alpha1/namespaces/NS/playbooklogs/NAME/log),
// with the user's own credentials: the API server checks `get playbooklogs/log` before the
// controller reads the store, whose credentials never leave the controller (docs/log-archive.md).
// A `log` subresource is long-running to the API server, so its request timeout does not cut a
// slow read.
import {
  LOG_API_ATTEMPT_HEADER,
  LOG_API_GROUP,
  LOG_API_RESOURCE,
  LOG_API_SUBRESOURCE,
  LOG_API_VERSION,
} from "../../api/log-archive.js";
import { ApiError } from "../../runtime/api-client.js";
import { EXIT } from "../exit-codes.js";
import { type Cluster, ClusterError, describeApiFailure, serverSaid } from "./connection.js";
import { RESOURCE } from "./playbooks.js";
import { isProgressRecord } from "./run-logs.js";

/** The permission an archived log takes, as a user grants it. */
export function archivePermission(namespace: string): string {
  return `get ${LOG_API_RESOURCE}/${LOG_API_SUBRESOURCE} (API group ${LOG_API_GROUP}) in namespace ${namespace}`;
}

/** The archive has no log of this attempt, or the cluster serves no archive (`served` false). */
export class ArchiveUnavailable extends Error {
  readonly served: boolean;

  constructor(message: string, served: boolean) {
    super(message);
    this.name = "ArchiveUnavailable";
    this.served = served;
  }
}

/** What the read found: the attempt (the latest when none was asked) and its length in bytes. */
export interface ArchivedRead {
  attempt: number;
  bytes: number;
}

function serverMessage(error: ApiError): string {
  return serverSaid(error) ?? error.message;
}

/**
 * Reads an attempt's archived log (the latest without `attempt`), each line to `onLine` but the
 * runner's progress records (as a pod's log is shown); `onOpen` first, with what is read. Rejects
 * with ArchiveUnavailable when there is none, with a ClusterError naming the permission on a 403.
 */
export async function readArchivedLog(
  cluster: Cluster,
  name: string,
  options: {
    attempt?: number | undefined;
    signal: AbortSignal;
    onOpen: (read: ArchivedRead) => void;
    onLine: (text: string) => void;
  },
): Promise<ArchivedRead> {
  const path = `/apis/${LOG_API_GROUP}/${LOG_API_VERSION}/namespaces/${encodeURIComponent(cluster.namespace)}/${LOG_API_RESOURCE}/${encodeURIComponent(name)}/${LOG_API_SUBRESOURCE}`;
  let read: ArchivedRead = { attempt: options.attempt ?? 0, bytes: 0 };
  try {
    await cluster.api.streamLines(
      path,
      options.attempt === undefined ? {} : { attempt: options.attempt },
      {
        onOpen: (headers) => {
          read = {
            attempt: Number(headers[LOG_API_ATTEMPT_HEADER] ?? options.attempt ?? 0),
            bytes: Number(headers["content-length"] ?? 0),
          };
          options.onOpen(read);
        },
        onLine: (text) => {
          if (!isProgressRecord(text)) options.onLine(text);
        },
      },
      { signal: options.signal },
    );
    return read;
  } catch (error) {
    if (!(error instanceof ApiError))
      throw describeApiFailure(error, { verb: "get", resource: LOG_API_RESOURCE, name }, cluster);
    const where = `(context ${cluster.context}, server ${cluster.server})`;
    if (error.code === 403)
      throw new ClusterError(
        `the log of ${RESOURCE} ${name} is in the log archive, which you may not read: it takes ${archivePermission(cluster.namespace)} (the chart's view, edit and admin roles grant it) ${where}\n  the API server said: ${serverMessage(error)}`,
        EXIT.invalid,
      );
    // 404: no such attempt archived (the log API's Status names the run in details.name), or no
    // archive served at all (no APIService: the API server's Status names nothing).
    if (error.code === 404) {
      const named = (error.body as { details?: { name?: unknown } } | null)?.details?.name;
      throw new ArchiveUnavailable(serverMessage(error), typeof named === "string");
    }
    // 503: the APIService is registered and its controller does not answer.
    if (error.code === 503)
      throw new ArchiveUnavailable(`the log archive's API does not answer: ${serverMessage(error)}`, true);
    throw describeApiFailure(
      error,
      { verb: "get", resource: `${LOG_API_RESOURCE}.${LOG_API_GROUP}`, name },
      cluster,
    );
  }
}
