// loadKubeConfigFiles: a user's token-file as kubectl reads it (client-node's KubeConfig drops it).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadKubeConfig, loadKubeConfigFiles } from "../../src/runtime/kube-config.js";

const scratch = mkdtempSync(path.join(tmpdir(), "kube-config-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
// client-node reads a token-file as it loads the kubeconfig: it exists.
const token = path.join(scratch, "token");
writeFileSync(token, "from-file");

function kubeconfig(name: string, user: string): string {
  const file = path.join(scratch, name);
  writeFileSync(
    file,
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]",
      `users: [{name: u, user: ${user}}]`,
      "contexts: [{name: x, context: {cluster: c, user: u}}]",
      "current-context: x",
    ].join("\n"),
  );
  return file;
}

const tokenFileOf = (files: string[]) =>
  (loadKubeConfigFiles(files).getCurrentUser()?.authProvider?.config as { tokenFile?: string } | undefined)
    ?.tokenFile;

describe("loadKubeConfigFiles", () => {
  it("reads the current user's token-file", () => {
    expect(tokenFileOf([kubeconfig("plain-key", `{token-file: ${token}}`)])).toBe(token);
  });

  it("takes a relative token-file from the kubeconfig's folder, as kubectl does, wherever it is run from", () => {
    mkdirSync(path.join(scratch, "tokens"), { recursive: true });
    writeFileSync(path.join(scratch, "tokens", "t"), "from-file");
    expect(process.cwd()).not.toBe(scratch);
    const file = kubeconfig("relative", "{token-file: tokens/t}");
    expect(tokenFileOf([file])).toBe(path.join(scratch, "tokens", "t"));
    // The controller's kubeconfig alike; and the rest of the file is as it was.
    const kubeConfig = loadKubeConfig(file);
    expect(kubeConfig.getCurrentCluster()?.server).toBe("https://127.0.0.1:6443");
    expect(kubeConfig.getCurrentUser()?.authProvider?.config).toEqual({
      tokenFile: path.join(scratch, "tokens", "t"),
    });
  });

  it("reads a token-file key however the YAML spells it", () => {
    expect(tokenFileOf([kubeconfig("escaped", `{"token\\u002dfile": ${token}}`)])).toBe(token);
  });

  it("leaves a user without a token-file as it is", () => {
    const user = loadKubeConfigFiles([kubeconfig("plain", "{token: abc}")]).getCurrentUser();
    expect(user?.token).toBe("abc");
    expect(user?.authProvider).toBeUndefined();
  });

  it("takes the user from the first file that names it, as kubectl merges KUBECONFIG", () => {
    const first = kubeconfig("first", "{token: abc}");
    const second = kubeconfig("second", `{token-file: ${token}}`);
    expect(tokenFileOf([first, second])).toBeUndefined();
    expect(tokenFileOf([second, first])).toBe(token);
  });
});
