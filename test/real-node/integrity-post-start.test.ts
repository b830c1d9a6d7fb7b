// A task against its run's outcome on the real kubelet (integrity.suite.ts), with the agent delivered by post-start.
// One file per layout, so the two run side by side on the shared real node.
import { agentLayout } from "../harness/task-images.js";
import { integritySuite } from "./integrity.suite.js";

integritySuite(agentLayout("post-start"));
