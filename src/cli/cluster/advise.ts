// `playbook advise cron NAME` and `playbook advise -l SELECTOR`: the history a cluster keeps (its
// Playbooks' status), read with list calls only; nothing is written. A CronPlaybook's runs are
// its labelled Playbooks, and its template is what the patch is for.
import { z } from "zod";
import { LOCAL_DEFAULTS } from "../../api/limits.js";
import { InvalidPlaybookError, validatePlaybook } from "../../api/manifest.js";
import { API_VERSION, KIND, PLURAL, type Playbook } from "../../api/playbook.js";
import { HistoryError, historyOf } from "../advise/history.js";
import { AdviseInputError, clusterAdviseFlags, printAdvice } from "../advise/request.js";
import { connect, describeApiFailure } from "./connection.js";
import { CRON_PLURAL, CRON_RESOURCE } from "./cron-trigger.js";
import { playbookPath } from "./playbooks.js";

const LABEL_CRON_PLAYBOOK = "playbook.dev/cron-playbook";

const ListSchema = z.looseObject({
  items: z.array(z.unknown()),
  metadata: z.looseObject({ continue: z.string().optional() }).optional(),
});

const CronSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string() }),
  spec: z.looseObject({
    template: z.looseObject({
      metadata: z.looseObject({ labels: z.record(z.string(), z.string()).optional() }).optional(),
      spec: z.unknown(),
    }),
  }),
});

/** Pages through the list, 250 at a time: a CronPlaybook keeps at most 200 runs. */
export async function listPlaybooks(
  cluster: ReturnType<typeof connect>,
  labelSelector: string,
): Promise<unknown[]> {
  const items: unknown[] = [];
  let token: string | undefined;
  do {
    let raw: unknown;
    try {
      raw = await cluster.api.call({
        method: "GET",
        path: playbookPath(cluster.namespace),
        query: { labelSelector, limit: 250, ...(token ? { continue: token } : {}) },
      });
    } catch (error) {
      throw describeApiFailure(error, { verb: "list", resource: PLURAL }, cluster);
    }
    const list = ListSchema.safeParse(raw);
    if (!list.success) throw new AdviseInputError("list playbooks: the API server's answer is not a list");
    items.push(...list.data.items);
    token = list.data.metadata?.continue || undefined;
  } while (token);
  return items;
}

/**
 * The CronPlaybook's template as a Playbook named after it: the spec its runs are made from, and
 * the labels they carry.
 */
export async function cronTemplate(
  cluster: ReturnType<typeof connect>,
  name: string,
): Promise<{ playbook: Playbook; labels: Record<string, string> }> {
  let raw: unknown;
  try {
    raw = await cluster.api.call({
      method: "GET",
      path: `/apis/${API_VERSION}/namespaces/${encodeURIComponent(cluster.namespace)}/${CRON_PLURAL}/${encodeURIComponent(name)}`,
    });
  } catch (error) {
    throw describeApiFailure(
      error,
      { verb: "get", resource: CRON_RESOURCE, name, kind: "CronPlaybook" },
      cluster,
    );
  }
  const cron = CronSchema.safeParse(raw);
  if (!cron.success)
    throw new AdviseInputError(`cronplaybook ${name}: the API server's answer has no spec.template`);
  try {
    const playbook = validatePlaybook(
      {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: { name, labels: { [LABEL_CRON_PLAYBOOK]: name } },
        spec: cron.data.spec.template.spec,
      },
      { ...LOCAL_DEFAULTS, maxCeilingMs: Number.MAX_SAFE_INTEGER },
      `cronplaybook ${name} spec.template`,
    );
    return { playbook, labels: cron.data.spec.template.metadata?.labels ?? {} };
  } catch (error) {
    if (error instanceof InvalidPlaybookError) throw new AdviseInputError(error.message);
    throw error;
  }
}

export async function adviseClusterCommand(rawFlags: unknown): Promise<number> {
  const { flags, request } = clusterAdviseFlags(rawFlags);
  const cluster = connect(flags);
  const cron = flags.cron;
  const selector = cron !== undefined ? `${LABEL_CRON_PLAYBOOK}=${cron}` : (flags.selector as string);
  const template = cron !== undefined ? (await cronTemplate(cluster, cron)).playbook : null;
  const items = await listPlaybooks(cluster, selector);
  const where = `namespace ${cluster.namespace} (context ${cluster.context})`;
  let histories: ReturnType<typeof historyOf>;
  try {
    histories = historyOf(
      items.map((value, index) => ({
        value: { apiVersion: API_VERSION, kind: KIND, ...(value as object) },
        source: `playbook ${(value as { metadata?: { name?: string } }).metadata?.name ?? `#${index}`}`,
      })),
      template ? { playbook: template, file: `cronplaybook ${cron}` } : null,
      "name",
    );
  } catch (error) {
    if (error instanceof HistoryError) throw new AdviseInputError(error.message);
    throw error;
  }
  if (template) histories = histories.filter((h) => h.playbook === template);
  if (histories.every((h) => h.runs.length === 0)) {
    throw new AdviseInputError(
      cron !== undefined
        ? `cronplaybook ${cron}: no finished run in ${where} (its runs are the Playbooks labelled ${selector})`
        : `-l ${selector}: no finished Playbook in ${where}`,
    );
  }
  return printAdvice(
    histories,
    request,
    cron !== undefined
      ? { kind: "CronPlaybook", name: cron, namespace: cluster.namespace }
      : { kind: "Playbook" },
  );
}
