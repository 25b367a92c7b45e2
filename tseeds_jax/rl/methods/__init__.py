"""rl/methods: one module per generation method, and the route a run is built with.

  base.py    `OnPolicy` (plan, generate, feedback) and `MethodSource` (a method behind the seam)
  seeds.py   Thinking Seeds: refresh cycle and seed cache
  traces.py  LUFFY's off-policy traces and their sources
  prefix.py  PrefixRL and QuestA (a prefix as context), registered
  branch.py  FR3E and CURE (branches from the step's own rollouts), registered
  registry.py  the restart methods' declarations (name, labels, checks, presets, streams, their
             row of the combination table, route), read by the config side and the tables
  routes.py  the run's route: method, [partial-rollout pool], [lag]
"""
