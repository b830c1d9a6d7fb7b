// What the CronPlaybook suites share: a schedule clock the test moves, a CronPlaybook's runs and
// its events, as a user would list them.
import type { CoreV1Event } from "@kubernetes/client-node";
import { LABEL_CRON_PLAYBOOK } from "../../src/api/cron-playbook.js";
import type { Clock } from "../../src/runtime/clock.js";
import { clients, eventually, kubectl } from "./support.js";

const { core } = clients();

/** The controller's schedule clock: real time plus an offset the test sets. */
export class MovableClock implements Clock {
  private offsetMs = 0;
  now(): Date {
    return new Date(Date.now() + this.offsetMs);
  }
  moveTo(at: Date): void {
    this.offsetMs = at.getTime() - Date.now();
  }
}

/** The names of a CronPlaybook's runs (its label), sorted. */
export async function runsOf(ns: string, name: string): Promise<string[]> {
  const { stdout } = await kubectl([
    "-n",
    ns,
    "get",
    "pb",
    "-l",
    `${LABEL_CRON_PLAYBOOK}=${name}`,
    "-o",
    "json",
  ]);
  return (JSON.parse(stdout) as { items: { metadata: { name: string } }[] }).items
    .map((i) => i.metadata.name)
    .sort();
}

/** The CronPlaybook's events of `reason`, once there is at least one. */
export async function cronEvents(ns: string, name: string, reason: string): Promise<CoreV1Event[]> {
  return eventually(`event ${reason} of cronplaybook ${ns}/${name}`, async () => {
    const { items } = await core.listNamespacedEvent({
      namespace: ns,
      fieldSelector: `involvedObject.name=${name},involvedObject.kind=CronPlaybook`,
    });
    const found = items.filter((e) => e.reason === reason);
    return found.length > 0 ? found : undefined;
  });
}
