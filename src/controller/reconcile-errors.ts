// The typed results of a reconcile pass that failed: which ones retrying cannot fix (terminal),
// and the facts a failed pod create carries back to the next pass.
/** A reconcile error that retrying cannot fix; the key is dropped until its objects change. */
export class TerminalReconcileError extends Error {}

/**
 * The pod's name is held by a pod this Playbook does not control (another owner's UID, or none):
 * the pass decides again with the name taken, so the run uses its alternate name.
 */
export class PodNameTakenError extends Error {
  readonly podName: string;

  constructor(podName: string, holder: string) {
    super(`pod ${podName} exists and is not this Playbook's: ${holder}`);
    this.podName = podName;
  }
}

/** The API server refused the pod as invalid: the run ends InvalidSpec. */
export class PodRefusedError extends TerminalReconcileError {}

/**
 * The API server would not create the pod (403, a missing service account): the run stays
 * Pending with the reason, and the key is retried with backoff, at the latest when its ceiling passes.
 */
export class PodCreateFailedError extends Error {
  readonly retryWithinMs: number | undefined;

  constructor(message: string, retryWithinMs: number | undefined) {
    super(message);
    this.retryWithinMs = retryWithinMs;
  }
}
