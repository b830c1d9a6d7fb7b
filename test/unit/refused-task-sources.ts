// Playbook specs whose task sources are refused, both by the schema (test/unit/task-sources.test.ts)
// and by the CRD's validation on a cluster (test/controller/task-sources-crd.test.ts, each with the
// API server's message for it).

/** A volume naming two volume types. */
export const VOLUME_OF_TWO_TYPES = {
  volumes: [{ name: "v", emptyDir: {}, secret: { secretName: "x" } }],
  tasks: [{ name: "a", run: "true" }],
};

/** An env var whose valueFrom names both a Secret's and a ConfigMap's key. */
export const VALUE_FROM_OF_TWO_SOURCES = {
  tasks: [
    {
      name: "a",
      run: "true",
      env: [
        {
          name: "P",
          valueFrom: {
            secretKeyRef: { name: "db", key: "p" },
            configMapKeyRef: { name: "c", key: "p" },
          },
        },
      ],
    },
  ],
};

/** An env var from a pod field the run's pod does not give its tasks. */
export const FIELD_THE_POD_DOES_NOT_GIVE = {
  tasks: [
    {
      name: "a",
      run: "true",
      env: [{ name: "N", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } }],
    },
  ],
};

/** An envFrom naming both a Secret and a ConfigMap. */
export const ENV_FROM_OF_BOTH_KINDS = {
  tasks: [{ name: "a", run: "true", envFrom: [{ secretRef: { name: "s" }, configMapRef: { name: "c" } }] }],
};
