// The shape of a Kueue Workload the controller reads (its owner, the pod, and its conditions): a
// file of its own so the decision's input and the Kueue decisions both take it from here.
/** A Workload as the controller reads it: its owner (the pod), its conditions and its admission's flavors. */
export interface WorkloadView {
  metadata: {
    name: string;
    namespace?: string | undefined;
    ownerReferences?: readonly { uid: string; kind?: string | undefined }[] | undefined;
  };
  status?: {
    conditions?:
      | readonly {
          type: string;
          status: string;
          reason?: string | undefined;
          message?: string | undefined;
          lastTransitionTime?: string | undefined;
        }[]
      | undefined;
    /** Where Kueue admitted each pod set: the ResourceFlavor of each resource. */
    admission?:
      | {
          podSetAssignments?:
            | readonly { name: string; flavors?: Readonly<Record<string, string>> | undefined }[]
            | undefined;
        }
      | undefined;
  };
}
