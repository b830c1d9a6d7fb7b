// The service account's token on a real kubelet (issue 33 item 3): a task reads it (and reaches
// the API server with it) in its own container, while the runner's container has no token at
// all, under both ways the agent reaches the task containers; an account that says
// automountServiceAccountToken: false gets no token anywhere. The namespace enforces the
// `restricted` Pod Security level, so each pod passes it too.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectlResult,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { AGENT_LAYOUTS } from "../harness/task-images.js";

const TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
// What @kubernetes/client-node's in-cluster configuration reads, and a call with it: /version
// answers any authenticated caller, so a 200 says the token is the account's and valid.
const CALL_API = [
  "const fs = require('node:fs'), https = require('node:https');",
  `const dir = '${TOKEN_DIR}/';`,
  "https.get({ host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT,",
  "  path: '/version', ca: fs.readFileSync(dir + 'ca.crt'),",
  "  headers: { authorization: 'Bearer ' + fs.readFileSync(dir + 'token', 'utf8') } }, (res) => {",
  "  res.resume(); res.on('end', () => console.log('api', res.statusCode));",
  "}).on('error', (e) => { console.log('api error', e.message); });",
].join(" ");
const TASK = [
  `if [ -s ${TOKEN_DIR}/token ]; then echo "token for $(cat ${TOKEN_DIR}/namespace)"; node -e "${CALL_API}"; else echo no token; fi`,
  // Long enough for the test to look inside the runner's container meanwhile.
  "sleep 12",
].join("\n");

const { core } = clients();
let namespace = "";
const controllers: RunningController[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-sa-token", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: "deployer" } } });
  await core.createNamespacedServiceAccount({
    namespace,
    body: { metadata: { name: "quiet" }, automountServiceAccountToken: false },
  });
});
afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  if (namespace) await deleteTestNamespace(core, namespace);
});

/** What the runner's container (or a task's) has at the token's path, through `kubectl exec`. */
async function tokenIn(pod: string, container: string): Promise<string> {
  const result = await kubectlResult([
    ...["-n", namespace, "exec", pod, "-c", container, "--"],
    ...["sh", "-c", `ls ${TOKEN_DIR} 2>/dev/null || echo none`],
  ]);
  expect(result.stderr).toBe("");
  return result.stdout.trim().split("\n").join(" ");
}

describe.each(AGENT_LAYOUTS)("with the agent delivered by $delivery", ({ setting, delivery }) => {
  beforeAll(async () => {
    await Promise.all(controllers.splice(0).map((c) => c.stop()));
    controllers.push(
      startController([namespace], {
        ...realNode.controller,
        agentDelivery: setting,
        allowedServiceAccounts: "deployer,quiet",
      }),
    );
  });

  it("gives the task's container the account's token, which the API server takes, and the runner's none", async () => {
    const name = `token-${delivery}`;
    await createPlaybook(namespace, name, {
      ceiling: "2m",
      serviceAccountName: "deployer",
      tasks: [{ name: "use", run: TASK }],
    });
    await eventually(
      "the task to have read the token",
      async () => ((await runnerLogs(namespace, name).catch(() => "")).includes("api ") ? true : undefined),
      realNode.taskStartMs,
    );
    expect(taskLines(await runnerLogs(namespace, name), "use")).toEqual([
      `token for ${namespace}`,
      "api 200",
    ]);
    expect(await tokenIn(`${name}-1`, "task-1")).toBe("ca.crt namespace token");
    expect(await tokenIn(`${name}-1`, "runner")).toBe("none");
    const ended = await waitForFinished(namespace, name, realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  });

  it("mounts no token at all for an account that says automountServiceAccountToken: false", async () => {
    const name = `quiet-${delivery}`;
    await createPlaybook(namespace, name, {
      ceiling: "2m",
      serviceAccountName: "quiet",
      tasks: [{ name: "use", run: TASK }],
    });
    await eventually(
      "the task to have looked for the token",
      async () =>
        (await runnerLogs(namespace, name).catch(() => "")).includes("no token") ? true : undefined,
      realNode.taskStartMs,
    );
    expect(await tokenIn(`${name}-1`, "task-1")).toBe("none");
    expect(await tokenIn(`${name}-1`, "runner")).toBe("none");
    const ended = await waitForFinished(namespace, name, realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  });
});
