// Kueue's names for its plain-pod integration, as sigs.k8s.io/kueue v0.17 spells them
// (pkg/controller/constants, pkg/controller/jobs/pod, apis/kueue/v1beta2). Pure data.

/** The pod label naming the LocalQueue (constants.QueueLabel). */
export const KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name";
/** The pod label naming the WorkloadPriorityClass (constants.WorkloadPriorityClassLabel). */
export const KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class";
/** Kueue's label on a pod it manages, and its finalizer on it (constants.ManagedByKueueLabelKey). */
export const KUEUE_MANAGED_LABEL = "kueue.x-k8s.io/managed";
/** The scheduling gate Kueue's webhook adds and removes at admission (podconstants.SchedulingGateName). */
export const KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission";
/**
 * The pod condition Kueue sets on a pod it stops before deleting it (ConditionTypeTerminationTarget);
 * its reason is WorkloadEvictedDueTo<the Workload's Evicted reason>, e.g. WorkloadEvictedDueToPreempted.
 */
export const KUEUE_TERMINATION_CONDITION = "TerminationTarget";
/** Every key Kueue adds to a pod's labels or annotations is under this prefix. */
export const KUEUE_KEY_PREFIX = "kueue.x-k8s.io/";

/** Kueue's Workload, as the controller reads it: only with --kueue. */
export const WORKLOAD_GROUP = "kueue.x-k8s.io";
export const WORKLOAD_VERSION = "v1beta2";
export const WORKLOAD_PLURAL = "workloads";
/** Workload conditions (apis/kueue/v1beta2/workload_types.go). */
export const WORKLOAD_QUOTA_RESERVED = "QuotaReserved";
export const WORKLOAD_ADMITTED = "Admitted";
export const WORKLOAD_EVICTED = "Evicted";
/** The finalizer the controller keeps on a Kueue pod until it has read the pod's end (preemption). */
export const PREEMPTION_FINALIZER = "playbook.dev/read-before-delete";

/** Whether `key` (a label or annotation key) is Kueue's. */
export const isKueueKey = (key: string) => key.startsWith(KUEUE_KEY_PREFIX);
