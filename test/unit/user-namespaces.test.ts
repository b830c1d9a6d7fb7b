// Run pods in their own user namespace (issue 56 section 3): `--user-namespaces auto` decides from
// the API server's version and every node's runtime and runtime handler; the pod the controller
// creates carries `hostUsers: false` exactly when it chose so, and the exact-pod comparison that
// adoption rests on takes a pod built under either choice (the controller may have switched since
// the create) and nothing else.
import { describe, expect, it } from "vitest";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { describePlaybook } from "../../src/cli/describe-playbook.js";
import { podUsersLine } from "../../src/cli/describe-pod-users.js";
import { ControllerConfigSchema } from "../../src/controller/config.js";
import type { PodView } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { unbuiltReason } from "../../src/controller/playbook/trusted-pod.js";
import { builtPodDifference } from "../../src/controller/pods/built-pod-difference.js";
import { CREATE_SKEW_MS } from "../../src/controller/pods/pod-identity.js";
import {
  chooseUserNamespaces,
  type UserNamespacesNode,
  userNamespacesProblem,
} from "../../src/controller/pods/user-namespaces.js";
import { at, createdPod, playbook, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

const node = (runtime: string, userNamespaces: boolean | undefined, name = "node-1"): UserNamespacesNode => ({
  name,
  runtime,
  userNamespaces,
});

describe("whether run pods get their own user namespace (--user-namespaces)", () => {
  it.each([
    [node("containerd://2.0.0", true), undefined],
    [node("containerd://2.4.2", true), undefined],
    [node("cri-o://1.25.0", true), undefined],
    [
      node("containerd://1.7.24", true),
      "runs containerd://1.7.24 (user namespaces need containerd 2.0+ or CRI-O 1.25+)",
    ],
    [
      node("cri-o://1.24.6", true),
      "runs cri-o://1.24.6 (user namespaces need containerd 2.0+ or CRI-O 1.25+)",
    ],
    [
      node("docker://28.2.2", true),
      "runs docker://28.2.2 (user namespaces need containerd 2.0+ or CRI-O 1.25+)",
    ],
    [node("", true), "runs an unreported runtime (user namespaces need containerd 2.0+ or CRI-O 1.25+)"],
    [
      node("containerd://2.4.2", false),
      "runs containerd://2.4.2 with an OCI runtime without user namespaces and idmapped mounts (runc 1.2+ or crun 1.9+ needed; status.runtimeHandlers[].features.userNamespaces is false)",
    ],
    [
      node("containerd://2.4.2", undefined),
      "does not report whether its runtime supports user namespaces (status.runtimeHandlers)",
    ],
  ])("takes node %j as %j", (n, problem) => {
    expect(userNamespacesProblem(n)).toBe(problem);
  });

  it("auto: on when the API server is 1.33+ and every node's runtime supports them", () => {
    expect(
      chooseUserNamespaces("auto", {
        serverVersion: "v1.33.0",
        nodes: [node("containerd://2.4.2", true), node("cri-o://1.31.0", true, "node-2")],
      }),
    ).toEqual({
      enabled: true,
      why: "auto: the API server is v1.33.0 and every node's runtime supports user namespaces (containerd://2.4.2, cri-o://1.31.0)",
    });
  });

  it.each([
    [
      "an older API server",
      { serverVersion: "v1.32.9", nodes: [node("containerd://2.4.2", true)] },
      "auto: the API server is v1.32.9, user namespaces need Kubernetes 1.33+",
    ],
    [
      "an API server not read",
      { serverVersion: undefined, nodes: [node("containerd://2.4.2", true)] },
      "auto: the API server is of an unknown version, user namespaces need Kubernetes 1.33+",
    ],
    [
      "no node yet",
      { serverVersion: "v1.36.5", nodes: [] },
      "auto: no node has reported its container runtime yet",
    ],
    [
      "one node whose OCI runtime has no idmapped mounts (Debian 12's runc 1.1.5)",
      {
        serverVersion: "v1.36.5",
        nodes: [node("containerd://2.4.2", true), node("containerd://2.4.2", false, "node-2")],
      },
      "auto: node node-2 runs containerd://2.4.2 with an OCI runtime without user namespaces and idmapped mounts (runc 1.2+ or crun 1.9+ needed; status.runtimeHandlers[].features.userNamespaces is false)",
    ],
  ])("auto: off with %s, saying why", (_, cluster, why) => {
    expect(chooseUserNamespaces("auto", cluster)).toEqual({ enabled: false, why });
  });

  it("a fixed setting is taken whatever the cluster", () => {
    const old = { serverVersion: "v1.30.0", nodes: [node("containerd://1.6.20", false)] };
    expect(chooseUserNamespaces("on", old)).toEqual({ enabled: true, why: "--user-namespaces on" });
    expect(
      chooseUserNamespaces("off", { serverVersion: "v1.36.5", nodes: [node("containerd://2.4.2", true)] }),
    ).toEqual({ enabled: false, why: "--user-namespaces off" });
  });

  it("the flag defaults to auto and refuses another word, naming it", () => {
    expect(ControllerConfigSchema.parse({}).userNamespaces).toBe("auto");
    const refused = ControllerConfigSchema.safeParse({ userNamespaces: "yes" });
    expect(refused.success).toBe(false);
    expect(JSON.stringify(refused.error?.issues)).toMatch(/userNamespaces/);
    expect(JSON.stringify(refused.error?.issues)).toMatch(/"auto"\|"on"\|"off"|auto.*on.*off/);
  });
});

/** The pod the controller creates for the run's first attempt, as the API server hands it back. */
function createdUnder(userNamespaces: boolean | undefined): { input: ReconcileInput; pod: PodView } {
  const run = playbook(SPEC);
  const settings = { ...SETTINGS, ...(userNamespaces === undefined ? {} : { userNamespaces }) };
  const built = createdPod(decide({ playbook: run, pods: [], now: T0, settings }).actions);
  const pod = {
    ...structuredClone(built),
    metadata: { ...structuredClone(built.metadata), uid: "pod-uid", creationTimestamp: T0.toISOString() },
  } as unknown as PodView;
  return { input: { playbook: run, pods: [pod], now: at(1), settings }, pod };
}

describe("the run's pod and its user namespace", () => {
  it("is created with hostUsers: false when the controller chose user namespaces, and without the field otherwise", () => {
    expect(createdUnder(true).pod.spec).toMatchObject({ hostUsers: false });
    expect(createdUnder(false).pod.spec).not.toHaveProperty("hostUsers");
    expect(createdUnder(undefined).pod.spec).not.toHaveProperty("hostUsers");
  });

  it("is the run's pod whichever choice the controller made since the create", () => {
    const on = createdUnder(true);
    expect(unbuiltReason(on.input, on.pod)).toBeUndefined();
    expect(
      unbuiltReason({ ...on.input, settings: { ...SETTINGS, userNamespaces: false } }, on.pod),
    ).toBeUndefined();
    const off = createdUnder(false);
    expect(
      unbuiltReason({ ...off.input, settings: { ...SETTINGS, userNamespaces: true } }, off.pod),
    ).toBeUndefined();
  });

  it("is foreign when it runs in the node's user namespace against the choice it was built under, naming hostUsers", () => {
    const on = createdUnder(true);
    const { hostUsers: _dropped, ...hostSpec } = on.pod.spec as Record<string, unknown>;
    expect(
      builtPodDifference(on.pod as never, createdUnder(true).pod as never, CREATE_SKEW_MS, {}),
    ).toBeUndefined();
    expect(
      builtPodDifference(
        { ...on.pod, spec: hostSpec } as never,
        createdUnder(true).pod as never,
        CREATE_SKEW_MS,
        {},
      ),
    ).toMatch(/hostUsers/);
    expect(builtPodDifference(on.pod as never, createdUnder(false).pod as never, CREATE_SKEW_MS, {})).toMatch(
      /hostUsers/,
    );
    const explicit = { ...on.pod, spec: { ...on.pod.spec, hostUsers: true } } as PodView;
    expect(unbuiltReason(on.input, explicit)).toMatch(/hostUsers/);
  });
});

describe("playbook describe's line on the run pod's user namespace", () => {
  it.each([
    [
      { kind: "found", name: "nightly-1", hostUsers: false },
      "Users:      own user namespace (pod nightly-1 has hostUsers: false): its users are unmapped on the node",
    ],
    [
      { kind: "found", name: "nightly-1", hostUsers: undefined },
      "Users:      the node's user namespace (pod nightly-1): the controller's --user-namespaces is off, or the cluster did not support them when it was created",
    ],
    [
      { kind: "none" },
      "Users:      no pod now: the controller's --user-namespaces (auto|on|off) decides when it creates one",
    ],
    [
      { kind: "unreadable", name: "nightly-1", why: "get pods forbidden by RBAC" },
      "Users:      pod nightly-1 not readable (get pods forbidden by RBAC)",
    ],
  ] as const)("%j: %s", (pod, line) => {
    expect(podUsersLine(pod)).toBe(line);
    const lines = describePlaybook(
      { name: "nightly", namespace: "ops", spec: PlaybookSpecSchema.parse(SPEC), status: undefined, pod },
      { kind: "none" },
      SETTINGS.defaults,
    );
    expect(lines[5]).toBe(line);
  });
});
