/* sim_report.h — the simulator's results as JSON (the `deepinfer sim` summary): one run's
 * figures, and the comparison of the control plane against its baselines as ratios. */
#ifndef DI_CLUSTER_SIM_SIM_REPORT_H
#define DI_CLUSTER_SIM_SIM_REPORT_H

#include "cluster/sim/sim.h"

#include <jansson.h>

/* One run: TTFT per tier, TPOT, imbalances, cache hit rates, throughput, moe_lb (ms for times). */
json_t *di_sim_result_json(const DiSimResult *r);
/* The knobs of a run (so every printed figure can be reproduced). */
json_t *di_sim_config_json(const DiSimConfig *c);
/* ours / baseline ratios (lower is better for every one except throughput). */
json_t *di_sim_ratios_json(const DiSimResult *ours, const DiSimResult *fifo_count, const DiSimResult *round_robin);

#endif
