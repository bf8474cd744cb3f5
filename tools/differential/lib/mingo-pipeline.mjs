// Running an aggregation pipeline through mingo's Aggregator, with every operator family loaded.

import { Aggregator } from "mingo";
import { Context } from "mingo/core";
import * as accumulatorOps from "mingo/operators/accumulator";
import * as expressionOps from "mingo/operators/expression";
import * as pipelineOps from "mingo/operators/pipeline";
import * as projectionOps from "mingo/operators/projection";
import * as queryOps from "mingo/operators/query";
import { byId } from "./mingo-runner.mjs";

const context = Context.init({
  accumulator: accumulatorOps,
  expression: expressionOps,
  pipeline: pipelineOps,
  projection: projectionOps,
  query: queryOps,
});

/** mingo's answer for a pipeline over docs (given to it in _id order, as Herald reads them). */
export function mingoPipeline(docs, pipeline) {
  try {
    const out = new Aggregator(pipeline, { context }).run(byId(docs));
    return { docs: JSON.parse(JSON.stringify(out)) };
  } catch (e) {
    return { error: "mingo_error", message: String(e?.message ?? e) };
  }
}
