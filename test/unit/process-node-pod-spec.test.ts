import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { containerEnv, expandReferences, resolveArgv } from "../harness/process-node/pod-spec.js";

const mapping = {
  commands: { playbook: ["/usr/bin/env", "node", "main.js"] },
  images: { "ghcr.io/x/runner": ["/bin/echo", "runner"] },
};
const env = { PATH: "/usr/bin:/bin", NAME: "world" };

describe("the process node's reading of a pod spec", () => {
  it.each([
    ["expands a defined variable", "hello $(NAME)", "hello world"],
    ["leaves an undefined reference as written", "$(MISSING)", "$(MISSING)"],
    ["unescapes $$", "$$(NAME) costs $$5", "$(NAME) costs $5"],
  ])("%s", (_name, input, expected) => {
    expect(expandReferences(input, env)).toBe(expected);
  });

  it("maps command[0] to a local argv prefix and appends the rest and args", () => {
    const container: V1Container = { name: "c", command: ["playbook", "pod-runner"], args: ["--x=$(NAME)"] };
    expect(resolveArgv(container, env, mapping)).toEqual({
      argv: ["/usr/bin/env", "node", "main.js", "pod-runner", "--x=world"],
    });
  });

  it("uses the image's mapped entrypoint when the container has no command", () => {
    const container: V1Container = { name: "c", image: "ghcr.io/x/runner:v1@sha256:abc", args: ["go"] };
    expect(resolveArgv(container, env, mapping)).toEqual({ argv: ["/bin/echo", "runner", "go"] });
  });

  it("reports a command that is not on PATH as a runtime would", () => {
    const container: V1Container = { name: "c", command: ["no-such-binary-here"] };
    expect(resolveArgv(container, env, mapping)).toEqual({
      error: 'exec: "no-such-binary-here": executable file not found in $PATH',
    });
  });

  it("builds the environment in order with field, secret and config map references", async () => {
    const pod: V1Pod = {
      metadata: { name: "p", namespace: "ns", labels: { app: "a" } },
      spec: { containers: [] },
    };
    const container: V1Container = {
      name: "c",
      envFrom: [{ configMapRef: { name: "cm" }, prefix: "CM_" }],
      env: [
        { name: "POD", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
        { name: "APP", valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
        { name: "TOKEN", valueFrom: { secretKeyRef: { name: "s", key: "token" } } },
        { name: "GREETING", value: "hi $(POD)" },
      ],
    };
    const read = async (
      kind: "Secret" | "ConfigMap",
      _ns: string,
      name: string,
    ): Promise<Record<string, string> | undefined> =>
      kind === "Secret" && name === "s"
        ? { token: "t0k" }
        : kind === "ConfigMap"
          ? { mode: "fast" }
          : undefined;
    expect(await containerEnv(pod, container, { PATH: "/bin" }, read)).toEqual({
      PATH: "/bin",
      CM_mode: "fast",
      POD: "p",
      APP: "a",
      TOKEN: "t0k",
      GREETING: "hi p",
    });
  });
});
