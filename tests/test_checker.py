"""The learner path: the starter template, and a checker that passes the reference and catches each mistake.

Each file in tests/broken/ is the reference with one deliberate mistake; the checker must fail it
at the mistake's stage, in the named check (and the ALSO checks), with the course's diagnosis. Only
those checks of that stage run per mistake, to keep the suite quick (the earlier stages use the
reference's own functions, see `test_mistakes_touch_only_their_stage`); every file in tests/correct/
passes every check of the stages it touches.
"""

import inspect
import json
import re
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from shardlab.checker import causes, command, formulas, padding
from shardlab.checker import cli as runner
from shardlab.learner import implementation, reference, rules, starter

BROKEN = Path(__file__).parent / "broken"
STAGE_OF = {"initial": 1, "next_batch": 1, "make_step": 2, "transition": 2, "contract": 3, "save": 3, "restore": 3}

# mistake file -> (stage, check that must fail, what its diagnosis must name: `cause:ID`, the id of a mistake
# (checker/causes.py) it must name, or a phrase it must contain, the numbers it read off the outputs; none for the
# mistakes in WITH_INPUTS, whose check and diagnosis tests/test_diagnosis_inputs.py judges once, beside the fault's
# account)
MISTAKES = {
    # stage 1: initial and next_batch
    "drop_remainder": (1, "batch_lengths_keep_the_remainder", ["cause:remainder-dropped", "the 2-id remainder"]),
    "top_up_remainder": (1, "batch_lengths_keep_the_remainder", ["cause:remainder-topped-up", "with 5 ids"]),
    "mutate_input": (1, "next_batch_returns_a_new_state", ["cause:dict-entries-replaced"]),
    "shuffle_order_in_place": (1, "next_batch_returns_a_new_state", ["cause:arrays-changed-in-place", "['order']"]),
    "unsplit_seed_key": (1, "first_order_follows_the_seed", ["cause:unsplit-key"]),
    "typed_key": (1, "initial_state_fields", ["cause:typed-key"]),
    "reuse_key": (1, "key_changes_at_each_new_epoch", ["cause:key-reused"]),
    "new_order_not_kept": (1, "epochs_follow_the_course_order", ["cause:new-order-not-kept"]),
    "cursor_by_batch_size": (
        1,
        "sampler_fields_follow_the_arithmetic",
        ["cause:cursor-by-batch-size", "moved from 21 to 28", "(7)"],
    ),
    "step_in_sampler": (1, "next_batch_leaves_step_alone", ["cause:step-in-sampler"]),
    "weights_on_host": (1, "initial_state_fields", ["cause:host-array", "weights"]),
    "batch_on_host": (1, "batch_is_placed_on_the_mesh", ["cause:host-array", "batch.features"]),
    "global_rng": (1, "replay_is_deterministic", ["cause:global-rng"]),
    "mask_from_values": (1, "padding_is_decided_by_position", ["cause:mask-from-values", "an all-zero row"]),
    "pad_to_batch_size": (
        1,
        "padding_is_decided_by_position",
        ["cause:slots-batch", "5 row(s) were padded to 12 slots", "(9)", "8 slots here"],
    ),
    "initial_places_on_first_devices": (
        1,
        "random_sampler_walk",
        ["cause:other-devices", "initial weights", "devices [3]", "a mesh of jax.devices() [3]"],
    ),
    "reshuffle_cached_by_key": (1, "random_sampler_walk", ["raised IndexError", "in next_batch"]),
    "initial_numpy_order_when_large": (
        1,
        "first_order_follows_the_seed",
        ["cause:order-by-row-count", "seed 17 on 1,048,577 rows", "is a permutation", "on 23 rows"],
    ),
    "batch_on_sorted_devices": (
        1,
        "random_sampler_walk",
        ["cause:other-device-order", "batch.features", "P('data', None)", "devices=2"],
    ),
    "batch_on_the_states_mesh": (
        1,
        "random_sampler_walk",
        ["cause:batch-on-the-states-mesh", "rule:placed-batch", "whatever devices the state's arrays live on"],
    ),
    "initial_bfloat16_weights": (1, "initial_state_fields", ["cause:initial-dtype", "dtype bfloat16"]),
    "padding_not_finite": (
        1,
        "padding_is_never_an_observation",
        ["cause:padding-not-finite", "rule:pad-by-position", "padded slot(s) [7]"],
    ),
    # stage 2: make_step and transition
    "averaging_local_means": (2, "gradient_on_tail_batches", ["cause:local-means"]),
    "local_count": (2, "gradient_independent_of_device_count", ["cause:grows-with-devices", "cause:local-count"]),
    "padding_counted": (
        2,
        "gradient_on_tail_batches",
        ["full batches pass but tails fail", "cause:padding-counted"],
    ),
    "missing_factor_two": (2, "gradient_on_a_full_batch", ["cause:missing-factor-two", "0.5 x"]),
    "residual_sign": (2, "gradient_on_a_full_batch", ["cause:residual-sign", "-1 x"]),
    "per_device_division": (
        2,
        "empty_device_contributes_zeros",
        ["cause:per-device-division", "device(s) [3]"],
    ),
    "loss_counts_padding": (2, "loss_on_full_and_tail_batches", ["cause:unmasked-residuals"]),
    "half_mse_loss": (2, "loss_on_full_and_tail_batches", ["cause:half-mse", "0.5 x"]),
    "momentum_before_reduction": (
        2,
        "consecutive_updates",
        ["cause:update-diverges", "cause:decay-on-every-device", "update 2", "3.2 = 4 devices x 0.8"],
    ),
    "ema_momentum": (2, "consecutive_updates", ["cause:averaged-momentum", "v <- 0.2*g from zero momentum"]),
    "decay_09": (2, "consecutive_updates", ["cause:update-diverges", "update 2", "v <- 0.9*v + 1*g"]),
    "decay_clamped": (
        2,
        "consecutive_updates",
        ["cause:hyperparameters-altered", "decay=0.99999994", "the outputs follow decay 0.99000001"],
    ),
    "loss_after_update": (2, "loss_is_taken_before_the_update", ["cause:after-update"]),
    "not_sharded": (2, "step_is_sharded", ["cause:not-sharded"]),
    "transition_counts_examples": (
        2,
        "transition_is_one_batch_and_one_update",
        ["cause:step-counts-examples", "step grew by 7"],
    ),
    "donated_weights": (2, "transition_leaves_its_input_intact", ["cause:donated-buffer"]),
    "loss_on_device": (2, "results_are_host_values", ["cause:loss-on-device", "ArrayImpl"]),
    "step_cached_by_device_count": (
        2,
        "step_follows_the_mesh_it_was_made_for",
        [],
    ),
    "gradient_squeezed": (2, "random_step_update", []),
    "learning_rate_through_float16": (
        2,
        "consecutive_updates",
        ["cause:update-diverges", "update 2", "w <- w - 0.02999"],
    ),
    "loss_as_numpy_float32": (
        2,
        "results_are_host_values",
        ["cause:loss-not-python-float", "numpy.float32"],
    ),
    # stage 3: contract, save and restore
    "checkpoint_without_momentum": (3, "checkpoint_holds_every_field", ["cause:field-missing", "['momentum']"]),
    "momentum_saved_as_float16": (
        3,
        "checkpoint_holds_every_field",
        ["cause:field-saved-narrow", "rule:exact-resume", "'momentum' is the state's momentum cast to float16"],
    ),
    "contract_as_object": (3, "checkpoint_holds_every_field", ["cause:pickled-member"]),
    "contract_shapes_as_tuples": (
        3,
        "checkpoint_holds_every_field",
        ["cause:contract-json-form", "rule:contract-json", "contract['features_shape'] is a tuple"],
    ),
    "contract_ignores_data": (3, "contract_pins_the_experiment", ["cause:contract-ignores-data", "['data bytes']"]),
    "restore_skips_contract": (3, "restore_refuses_another_experiment", ["cause:contract-not-compared"]),
    "save_overwrites": (3, "save_never_overwrites", ["cause:overwrites"]),
    "restore_resets_cursor": (3, "restore_returns_every_field", ["cause:restore-resets-cursor"]),
    "restore_resets_key": (3, "restore_returns_every_field", ["cause:restore-changes-key"]),
    "restore_keeps_numpy_weights": (
        3,
        "restore_returns_every_field",
        ["cause:host-array", "replicated placement of weights"],
    ),
    "restore_order_in_the_files_width": (
        3,
        "restore_returns_every_field",
        [
            "rule:exact-resume",
            "gave back order as int64 where the saved state held int32",
            "in the dtype the saved state holds",
        ],
    ),
    "restore_counters_as_numpy_scalars": (
        3,
        "restore_returns_every_field",
        [
            "rule:exact-resume",
            "cursor as a NumPy int64 where the saved state held a Python int",
            "json.dumps refuses a NumPy integer",
        ],
    ),
    "restore_skips_validation": (
        3,
        "restore_refuses_damaged_checkpoints",
        [
            "rule:validate-fields",
            "'cursor -1'",
            "'cursor 24 (rows + 1)'",
            "'duplicate id in order'",
            "0 <= cursor <= rows",
        ],
    ),
    "save_leaves_temp": (3, "save_leaves_only_the_final_file", ["cause:leftovers"]),
    "save_temp_before_checking": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        [
            "rule:new-temp-name",
            "a state without weights: raised CorruptCheckpointError and left ['tmp",
            "before creating the temporary file",
        ],
    ),
    "save_in_place": (3, "interrupted_save_leaves_nothing_or_a_checkpoint", ["cause:written-in-place"]),
    "save_naive_savez": (3, "save_syncs_before_publishing", ["cause:no-publication", "in place"]),
    "save_refuses_with_oserror": (3, "save_never_overwrites", ["cause:refusal-not-the-courses"]),
    "restore_accepts_non_finite": (3, "restore_refuses_damaged_checkpoints", ["rule:refuse-nan", "non-finite weights"]),
    "save_replace_races": (3, "racing_saves_never_overwrite", ["cause:check-then-replace"]),
    "save_removes_live_temporaries": (
        3,
        "racing_saves_never_overwrite",
        [],
    ),
    "save_lock_in_memory": (
        3,
        "racing_saves_never_overwrite",
        ["a second saver (another process)", "cause:check-then-replace"],
    ),
    "save_temp_named_by_pid_and_counter": (
        3,
        "interrupted_save_leaves_nothing_or_a_checkpoint",
        [
            "rule:new-temp-name",
            "a name made of the pid and a counter that starts anew in every process is no new name",
            "the name a save killed in an earlier process with the re-run's own pid would have left",
        ],
    ),
    "save_fixed_temp_name": (
        3,
        "interrupted_save_leaves_nothing_or_a_checkpoint",
        [
            "rule:new-temp-name",
            "left ['checkpoint.npz.partial'] behind",
            "a new save to the same, still free name was refused",
        ],
    ),
    # the randomised checks: each planted mistake is found and shrunk to the minimal case named here
    "remainder_of_one_dropped": (
        1,
        "random_sampler_walk",
        ["a new epoch started although 1 id(s) of this epoch were unread", "rows=2, batch=1, devices=1, features=1"],
    ),
    "next_batch_reads_data_fields": (
        1,
        "random_sampler_walk",
        [
            "rule:plain-tuple-data",
            "AttributeError",
            "data is any (features, targets) pair",
            "data as a plain (features, targets) tuple",
            "\"sampler_walk\", rows=1, batch=1, devices=1, features=1, seed=0, data_form='tuple')",
        ],
    ),
    "pad_extra_when_multiple": (
        1,
        "random_sampler_walk",
        [
            "cause:slots-extra",
            "1 row(s) were padded to 2 slots: it fits a whole extra device's worth of padding",
            "(mesh.size = 1), 1 slot here",
            '"sampler_walk", rows=1, batch=1, devices=1, features=1',
        ],
    ),
    "transition_ignores_step": (
        2,
        "random_transition_walk",
        [
            "rule:one-update",
            "called the step it was given 0 time(s)",
            "never one it builds",
            "rows=1, batch=1, devices=1",
        ],
    ),
    "transition_calls_step_twice": (
        2,
        "random_transition_walk",
        [
            "rule:one-update",
            "called the step it was given 2 time(s)",
            "one call of the step",
            "rows=1, batch=1, devices=1",
        ],
    ),
    "step_ignores_learning_rate": (
        2,
        "random_step_update",
        ["cause:course-learning-rate", "w <- w - 0.03*v", '"step_update", rows=1, devices=1'],
    ),
    "eager_step_ignores_hyperparameters": (
        2,
        "random_step_update",
        [
            "cause:course-learning-rate",
            "the un-jitted step (compiled=False)",
            "w <- w - 0.03*v",
            '"step_update", rows=1, devices=1',
        ],
    ),
    "restore_places_on_first_devices": (
        3,
        "random_restore_damage",
        [
            "cause:other-devices",
            "the restored weights is not placed as P()",
            "the mesh given holds devices [3]",
            "rows=1",
        ],
    ),
    "restore_scalars_by_size": (
        3,
        "random_restore_damage",
        ["cause:accepts-damaged-field", "(same numbers)", "cursor and step are single integers, 0-d arrays", "rows=1"],
    ),
    "save_temp_in_system_folder": (
        3,
        "save_syncs_before_publishing",
        ["cause:temporary-elsewhere"],
    ),
    "contract_rounds_to_ten_decimals": (
        3,
        "random_contract_tells_apart",
        ["cause:hyperparameter-rounded", "(one float32 step apart)", "rows=1, batch=1"],
    ),
    "contract_seven_significant_digits": (
        3,
        "random_contract_tells_apart",
        ["cause:hyperparameter-rounded", "(one float32 step apart)", "rows=1, batch=1, devices=1"],
    ),
    "contract_rounds_learning_rate": (
        3,
        "random_contract_tells_apart",
        ["cause:hyperparameter-rounded", "['learning rate (x(1 + 2^-20))', 'decay", "rows=1, batch=1, devices=1"],
    ),
    "contract_hashes_a_prefix": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-ignores-data", "['large fixture: last 64 rows reordered', 'large fixture: one ulp", "rows=1"],
    ),
    "contract_names_the_process": (
        3,
        "contracts_agree_in_a_fresh_process",
        ["cause:contract-varies", "another contract in a fresh interpreter"],
    ),
    "contract_hashes_a_str": (
        3,
        "contracts_agree_in_a_fresh_process",
        ["cause:contract-varies", "another contract in a fresh interpreter"],
    ),
    "restore_refuses_epoch_end": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "(cursor 1 of 1, ", "cursor = rows are both in bounds", "rows=1, batch=1, devices=1"],
    ),
    "restore_compares_rounded_contract": (
        3,
        "random_restore_damage",
        [
            "cause:accepts-another-experiment",
            "given another experiment's contract (learning rate (x(1 + 2^-20)))",
            "rows=1, batch=1",
        ],
    ),
    "save_keeps_host_copies": (
        3,
        "random_restore_damage",
        [
            "rule:save-inputs-intact",
            "save changed its caller's inputs: state['momentum'] was jax.Array float32 (1,)",
            "now numpy.ndarray",
            '"restore_damage", rows=1, batch=1, devices=1, features=1',
        ],
    ),
    "save_appends_npz_suffix": (
        3,
        "random_restore_damage",
        [
            "rule:exact-path",
            "at exactly the path it is given",
            "np.savez appends .npz",
            "file name checkpoint,",
            "rows=1, batch=1",
        ],
    ),
    "restore_opens_before_checking": (
        3,
        "invalid_arguments_are_refused",
        [
            "rule:validate-fields",
            "restore: a path that does not exist: FileNotFoundError (not CorruptCheckpointError)",
            "OSError included",
        ],
    ),
    "save_replaces_empty_file": (
        3,
        "invalid_arguments_are_refused",
        [
            "rule:never-overwrite",
            "save: a path holding an empty file: accepted (no error), changed ['checkpoint.npz']",
            "never remove it",
        ],
    ),
    "restore_raises_value_error": (
        3,
        "random_restore_damage",
        ["cause:refusal-not-the-courses", "refused with ValueError, not errors.CorruptCheckpointError", "rows=1"],
    ),
    "restore_accepts_nan_momentum": (
        3,
        "random_restore_damage",
        ["cause:accepts-non-finite", "momentum: NaN", "rows=1, batch=1, devices=1"],
    ),
    "restore_checksum_and_finite_weights_only": (
        3,
        "random_restore_damage",
        ["cause:accepts-non-finite", "rule:refuse-nan", "momentum written by your save: NaN", "rows=1, batch=1"],
    ),
    "restore_checksum_and_isnan": (
        3,
        "random_restore_damage",
        ["cause:accepts-non-finite", "weights written by your save: +inf", "momentum written by your save: -inf"],
    ),
    "restore_isnan_under_a_refusing_save": (
        3,
        "random_restore_damage",
        [
            "cause:accepts-non-finite",
            "rule:refuse-nan",
            "weights in your file, its integrity hash recomputed: +inf",
            "momentum in your file, its integrity hash recomputed: -inf",
            "rows=1, batch=1",
        ],
    ),
    "restore_finite_momentum_only_under_a_refusing_save": (
        3,
        "random_restore_damage",
        ["cause:accepts-non-finite", "rule:refuse-nan", "weights in your file, its integrity hash recomputed: NaN"],
    ),
    "restore_leaves_finiteness_to_the_checksum": (
        3,
        "random_restore_damage",
        ["cause:accepts-non-finite", "rule:refuse-nan", "momentum written by your save: NaN", "rows=1, batch=1"],
    ),
    "save_fsync_before_write": (
        3,
        "save_syncs_before_publishing",
        ["cause:fsync-before-last-write"],
    ),
    "save_publishes_before_fsync": (
        3,
        "save_syncs_before_publishing",
        ["cause:no-fsync-before-publish"],
    ),
    "save_without_fsync": (
        3,
        "save_syncs_before_publishing",
        ["cause:no-fsync-before-publish", "no fsync (or fdatasync) of the file between the last write and publishing"],
    ),
    "save_temp_named_by_process": (
        3,
        "racing_saves_never_overwrite",
        [
            "rule:new-temp-name",
            "a second save of the same path in the same process",
            "draw a new temporary name for every save",
        ],
    ),
    "save_step_as_int16": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "a long run's step", "np.int64", "batch=1, devices=1, features=1"],
    ),
    "gradient_clipped": (2, "gradient_on_a_full_batch", ["cause:clipped", "g * min(1, 1/|g|)"]),
    "count_in_bfloat16": (
        2,
        "count_is_exact_on_a_large_batch",
        ["cause:narrow-count", "a division by 32,768.0", "32,784 valid rows", "bfloat16"],
    ),
    "count_plus_epsilon": (
        2,
        "count_is_exact_on_a_large_batch",
        ["cause:count-offset", "not by the count 1"],
    ),
    "loss_as_a_norm_squared": (2, "count_is_exact_on_a_large_batch", ["cause:loss-numerator-rounds", "on 1 device(s)"]),
    "count_from_the_mask_mean": (
        2,
        "count_is_exact_on_a_large_batch",
        ["cause:count-offset", "not by the count 32", "in 164 slots on 4 device(s)"],
    ),
    "restore_touches_the_file": (
        3,
        "restore_returns_every_field",
        ["cause:restore-touches-the-file", "run\\\\checkpoint.npz"],
    ),
    "save_normalises_the_counters": (
        3,
        "checkpoint_holds_every_field",
        ["cause:save-changes-its-inputs", "state['cursor'] was int64 np.int64(7), now int 7"],
    ),
    "transition_rounds_the_loss": (2, "transition_is_one_batch_and_one_update", ["cause:loss-altered", "transition 1"]),
    "save_undoes_its_folders_with_rmtree": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["cause:removes-what-it-found", "removed another-saver.npz, another saver's file"],
    ),
    "save_undoes_its_folders_with_removedirs": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["cause:removes-what-it-found", "in an empty folder that was there before", "removed ['found']"],
    ),
    "restore_compares_floats_closely": (
        3,
        "restore_refuses_another_experiment",
        ["cause:contract-compared-loosely", "learning_rate: 0.03 -> the next float64 0.030000000000000002"],
    ),
    "contract_float32_hyperparameters": (
        3,
        "random_contract_tells_apart",
        ["cause:hyperparameter-float64-merged", "['learning rate (the next float64)', 'decay (the next float64)']"],
    ),
    "save_order_as_int16": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "data of 65,537 rows", "int16 holds 32,767", "np.int32"],
    ),
    "save_strips_the_name": (
        3,
        "random_restore_damage",
        ["rule:exact-path", "has spaces at its ends", "save stripped them"],
    ),
    "contract_samples_large_data": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-ignores-data", "a dataset of 1,048,577 rows: row 524,309's feature and target + 1"],
    ),
    "save_normalises_the_name": (
        3,
        "random_restore_damage",
        ["rule:exact-path", "is not in Unicode normal form NFC", "save normalised the name (unicodedata.normalize)"],
    ),
    "save_expands_variables": (
        3,
        "random_restore_damage",
        [
            "rule:exact-path",
            "the name given holds $ or % characters",
            "save expanded environment variables in it (os.path.expandvars)",
        ],
    ),
    "step_requires_python_floats": (
        2,
        "consecutive_updates",
        ["cause:hyperparameter-types-refused", "learning_rate=2 (int), decay=0 (int)) raised ConfigError"],
    ),
    "restore_counters_through_float32": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "came back with step 16777216: the step went through a float32", "np.int64"],
    ),
    "restore_expands_variables": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "the path given with $HOME or %HOME% expanded", "restore expanded environment variables"],
    ),
    "restore_widens_the_key": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "gave back key as int64(2,)", "the key uint32 (2,)", "rows=1, batch=1"],
    ),
    "restore_order_of_its_own_length": (
        3,
        "random_restore_damage",
        ["cause:accepts-damaged-field", "order: one id too few", "rows=1, batch=1"],
    ),
    "contract_hashes_sorted_rows": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-ignores-data", "['two rows swapped']", "rows=2, batch=1, devices=1, features=1"],
    ),
    "contract_crc32": (
        3,
        "random_contract_tells_apart",
        ["rule:contract-pins", "carry about 32 bits", "birthday bound", "rows=1, batch=1"],
    ),
    "step_takes_only_float_learning_rates": (
        2,
        "random_step_update",
        ["rule:momentum", "the course's default learning rate", "make_step given learning_rate", "numbers='"],
    ),
    "step_type_tests_the_learning_rate": (
        2,
        "random_step_update",
        ["rule:momentum", "the course's default learning rate", "make_step given learning_rate np.", "numbers='"],
    ),
    "step_cached_by_number_types": (
        2,
        "random_transition_walk",
        ["rule:momentum", "the step depends on the numbers' types", "make_step given learning_rate np.", "numbers='"],
    ),
    "step_cache_rounded_lr": (
        2,
        "random_step_update",
        [
            "rule:momentum",
            "new weights and momentum equal those of make_step(learning_rate=",
            "cache keyed by rounded",
            "rows=1, devices=1",
        ],
    ),
    "step_skips_psum_on_one_device": (
        2,
        "random_step_update",
        ["cause:not-sharded", "a mesh of 1 device(s)", "rows=1, devices=1"],
    ),
    "step_mask_as_prefix": (
        2,
        "random_step_update",
        [
            "rule:global-mean",
            "padded slots sit between valid ones",
            "select each slot by mask > 0",
            "contents: mask with gaps",
        ],
    ),
    "contract_hashes_printed_arrays": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-ignores-data", "alike at 8 printed digits", "no rounding", "rows=1, batch=1, devices=1"],
    ),
    "contract_hashes_the_buffer": (3, "random_contract_tells_apart", []),
    "save_moves_into_the_folder": (3, "random_restore_damage", []),
    "save_expands_home": (3, "random_restore_damage", []),
    "restore_finite_by_magnitude": (
        3,
        "random_restore_damage",
        ["momentum of magnitude 3e38", "finite means np.isfinite", "rows=1, batch=1, devices=1"],
    ),
    "restore_finite_via_sum": (3, "random_restore_damage", ["momentum of magnitude 3e38", "not a test of a sum"]),
    "restore_without_contract_member": (
        3,
        "random_restore_damage",
        ["cause:accepts-another-experiment", "contract: missing", "rows=1, batch=1"],
    ),
    "restore_reads_pickles": (
        3,
        "random_restore_damage",
        ["cause:pickled-member", "an extra member holding a pickled object array", "the pickle RAN inside restore"],
    ),
    "save_returns_realpath": (
        3,
        "random_restore_damage",
        ["rule:exact-path", "the same file reached another way", "return the path argument itself", "rows=1, batch=1"],
    ),
    # valid inputs written another way: states, arguments, contracts and files the learner's own calls never make
    "eager_without_lazy_branch": (
        1,
        "sampler_fields_follow_the_arithmetic",
        ["cause:no-lazy-epoch-end", "in the lazy form (cursor", "a cursor of rows is a valid state"],
    ),
    "padding_buffer_by_batch_size": (
        1,
        "batch_lengths_keep_the_remainder",
        ["cause:sized-by-batch-size", "batch size 2**40 on", "MemoryError", "never by batch_size"],
    ),
    "restore_compares_contract_text": (
        3,
        "restore_returns_every_field",
        ["rule:contract-first", "same entries in another key order", "entry by entry"],
    ),
    "restore_opens_for_writing": (
        3,
        "restore_returns_every_field",
        ["rule:exact-resume", "open r+b checkpoint.npz", "restore only reads"],
    ),
    "save_leaves_the_folder_open": (
        3,
        "save_leaves_only_the_final_file",
        ["rule:new-temp-name", "still open", "os.close in a finally"],
    ),
    "restore_leaves_the_file_open": (
        3,
        "restore_returns_every_field",
        ["rule:exact-resume", "checkpoint.npz'] still open", "restore fails"],
    ),
    "restore_caps_the_file_size": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "1 row x 2,097,153 features", "never by a fixed number of bytes"],
    ),
    "restore_falls_back_to_npz_name": (
        3,
        "invalid_arguments_are_refused",
        ["rule:validate-fields", "a checkpoint at it + '.npz': accepted (no error)", "never a name beside it"],
    ),
    "restore_reads_the_folders_checkpoint": (
        3,
        "invalid_arguments_are_refused",
        [
            "rule:validate-fields",
            "a folder holding checkpoint.npz: accepted (no error)",
            "a checkpoint.npz in the folder at the path",
        ],
    ),
    "restore_reads_a_pattern": (
        3,
        "invalid_arguments_are_refused",
        [
            "rule:validate-fields",
            "a checkpoint its name matches as a pattern: accepted (no error)",
            "never as a pattern",
        ],
    ),
    "save_strips_trailing_separator": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        [
            "rule:exact-path",
            "a path ending in a separator: returned, but left no file",
            "a save that strips the separator",
        ],
    ),
    "save_backslash_as_separator": (
        3,
        "restore_returns_every_field",
        ["rule:exact-path", "a name holding a backslash", "a backslash is a letter of a file name"],
    ),
    "restore_backslash_as_separator": (
        3,
        "restore_returns_every_field",
        ["rule:exact-resume", "restore refused the checkpoint its own save wrote at a name holding a backslash"],
    ),
    "restore_clears_temporaries": (
        3,
        "restore_returns_every_field",
        ["rule:restore-inputs-intact", "changed ['.tmp-", "restore only reads: it removes no temporary"],
    ),
    "save_temp_named_by_state_id": (
        3,
        "racing_saves_never_overwrite",
        ["rule:new-temp-name", "one state saved to two free names", "rival: refused", "draw a new name for every save"],
    ),
    "save_makes_folder_first": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["rule:new-temp-name", "a folder that does not exist, and a state without step", "or the missing folder"],
    ),
    "save_leaves_made_folders": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        [
            "rule:new-temp-name",
            "two levels deep in an empty folder",
            "its first write fails",
            "left ['found/new', 'found/new/deeper']",
        ],
    ),
    "save_part_written_outside_try": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        [
            "rule:new-temp-name",
            "there before, and its first write fails",
            ".part'] behind",
            "in a finally (or except) block",
        ],
    ),
    "save_part_written_by_os_write": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["rule:new-temp-name", "there before, and its first write fails (its write raises ENOSPC)", ".part'] behind"],
    ),
    "save_clears_a_dangling_link": (
        3,
        "invalid_arguments_are_refused",
        [
            "rule:never-overwrite",
            "save: a symbolic link that leads nowhere: accepted",
            "one that leads nowhere included",
        ],
    ),
    "save_removes_folders_it_found": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        [
            "cause:removes-what-it-found",
            "there before, and its publication fails",
            "removed ['kept', 'kept/inner']",
            "never one that was there",
        ],
    ),
    "save_temp_name_from_global_random": (
        3,
        "interrupted_save_leaves_nothing_or_a_checkpoint",
        ["rule:new-temp-name", "drew the killed save's own temporary name", "global random module"],
    ),
    "restore_compares_shared_keys": (
        3,
        "random_restore_damage",
        ["cause:accepts-another-experiment", "contract: one entry less", "contract: one entry more"],
    ),
    "restore_checks_fields_first": (
        3,
        "random_restore_damage",
        ["cause:refusal-not-the-courses", "given another experiment's contract (seed)", "rows=1, batch=1"],
    ),
    "restore_checks_shapes_before_contract": (
        3,
        "random_restore_damage",
        [
            "cause:refusal-not-the-courses",
            "given another experiment's contract (rows)",
            "not errors.ContractMismatchError",
            "before the contracts were",
        ],
    ),
    "restore_bounds_size_before_contract": (
        3,
        "random_restore_damage",
        [
            "cause:refusal-not-the-courses",
            "a file of 16,384 features",
            "not errors.ContractMismatchError",
            "refused for its size",
            "saved at start",
        ],
    ),
    "contract_hashes_the_pickle": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-varies", "with the same values in other memory layouts", "rows=2, batch=1"],
    ),
    "contract_converts_numpy_floats_only": (
        3,
        "random_contract_tells_apart",
        ["rule:contract-json", "0-d float64 arrays", "not plain JSON", "rows=1, batch=1"],
    ),
    "contract_keeps_numpy_numbers": (
        3,
        "random_contract_tells_apart",
        ["rule:contract-json", "NumPy float32 scalars", "not plain JSON", "rows=1, batch=1"],
    ),
    "step_reads_the_latest_hyperparameters": (
        2,
        "random_step_update",
        ["rule:momentum", "first run after make_step(", "used the later call's", "a closure"],
    ),
    "contract_names_the_interpreter": (
        3,
        "contracts_agree_in_a_fresh_process",
        ["cause:contract-varies", "in a fresh interpreter"],
    ),
    "mask_by_multiplication": (
        2,
        "random_step_update",
        [
            "rule:global-mean",
            "made the outputs non-finite",
            "never multiply by the mask",
            '"step_update", rows=1, devices=1',
        ],
    ),
    "loss_expanded_square": (
        2,
        "random_step_update",
        ["rule:global-mean", "loss on large data", "float32 rounding allows", "contents='large data'"],
    ),
    "step_replicates_inputs": (2, "random_step_update", ["gives every device all", "not data parallel"]),
    "loss_capped": (
        2,
        "random_step_update",
        ["rule:global-mean", "scaled up (features and residuals at most 1e17", "a loss smaller"],
    ),
    "gradient_drops_tiny_entries": (
        2,
        "random_step_update",
        [
            "rule:global-mean",
            "scaled down (features and residuals at most 1e-12",
            "gave a grad and momentum of exact zeros",
            "no threshold",
        ],
    ),
    "reshuffle_leaves_device_arrays": (
        1,
        "random_sampler_walk",
        [
            "'key': 'host -> a jax.Array'",
            "stay host NumPy after a reshuffle",
            "rows=1, batch=1, devices=1",
        ],
    ),
    "initial_cached_by_seed": (
        1,
        "random_sampler_walk",
        ["rule:initial-fields", "the state initial returned", "a state made for other data"],
    ),
    "contract_hashes_every_eighth_row": (
        3,
        "restore_refuses_another_experiment",
        [],
    ),
    "restore_pops_the_contract": (
        3,
        "refusals_name_the_course_errors",
        [],
    ),
    "contract_freezes_the_data": (
        3,
        "random_contract_tells_apart",
        [],
    ),
    "save_stamps_the_contract": (
        3,
        "random_restore_damage",
        ["rule:save-inputs-intact", "save changed its caller's inputs", "saved_at_step"],
    ),
    "restore_cached_by_path": (
        3,
        "random_restore_damage",
        ["cause:accepts-another-experiment", "given another experiment's contract", "no cache by path"],
    ),
    "gradient_summed_twice": (
        2,
        "gradient_on_tail_batches",
        [],
    ),
    "gradient_output_is_momentum": (
        2,
        "consecutive_updates",
        ["cause:momentum-as-gradient", "update 2"],
    ),
    "restore_permutation_by_sum": (
        3,
        "random_restore_damage",
        ["cause:accepts-damaged-field", "order: ids in range with a permutation's sum", "rows=3"],
    ),
    "restore_permutation_by_ends_and_sum": (
        3,
        "random_restore_damage",
        ["cause:accepts-damaged-field", "order: ids with a permutation's smallest, largest and sum", "rows=5"],
    ),
    "restore_catches_the_read_errors_it_names": (
        3,
        "random_restore_damage",
        ["cause:refusal-not-the-courses", "every member marked encrypted", "refused with RuntimeError"],
    ),
    "ids_in_a_reused_buffer": (
        1,
        "batch_lengths_keep_the_remainder",
        ["cause:result-changed-later", "`next_batch` returned an array", "its result[1].ids"],
    ),
    "batch_from_a_reused_buffer": (
        1,
        "batch_lengths_keep_the_remainder",
        ["cause:result-changed-later", "`next_batch` returned an array (its result[1].", "jax.device_put made from"],
    ),
    "restore_cached_by_path_and_contract": (
        3,
        "random_restore_damage",
        ["rule:exact-resume", "removed and saved anew at the same path", "no cache by path", "rows=1, batch=1"],
    ),
    "save_joins_the_import_folder": (
        3,
        "random_restore_damage",
        ["rule:exact-path", "the path given is relative", "relative to the working folder when save is called"],
    ),
    "save_temp_named_after_the_target": (
        3,
        "racing_saves_never_overwrite",
        ["rule:new-temp-name", "both saves used the same temporary name checkpoint.npz.tmp", "derived from the target"],
    ),
    "save_temp_from_a_seeded_generator": (
        3,
        "racing_saves_never_overwrite",
        ["rule:new-temp-name", "both saves used the same temporary name .tmp-", "seeded generator"],
    ),
    "save_publishes_in_a_thread": (
        3,
        "checkpoint_holds_every_field",
        ["rule:exact-path", "no file is at the path it was given", "before save returns", "a thread"],
    ),
    "transition_fetches_the_weights": (
        2,
        "step_follows_the_mesh_it_was_made_for",
        [],
    ),
    "restore_writes_into_the_contract": (
        3,
        "restore_returns_every_field",
        [],
    ),
    "save_renameat2_before_fsync": (
        3,
        "save_syncs_before_publishing",
        ["cause:no-fsync-before-publish", "no fsync (or fdatasync) of the file between the last write and publishing"],
    ),
    "contract_hashes_the_memory_order": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-varies", "with the same values in other memory layouts", "rows=2"],
    ),
    "contract_names_the_dtype_alone": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-ignores-data", "the features' bytes read as big-endian float32", "rows=1, batch=1"],
    ),
    "contract_records_the_folder": (
        3,
        "random_contract_tells_apart",
        ["cause:contract-varies", "called from another working folder", "rows=1, batch=1"],
    ),
    "contract_cached_by_array_id": (
        3,
        "random_contract_tells_apart",
        ["rule:contract-pins", "changed in place (+1)", "kept between calls by the arrays' identity"],
    ),
    "transition_fetches_the_batch": (
        2,
        "random_transition_walk",
        ["cause:batch-fetched", "transition 1", "rows=1, batch=1, devices=1"],
    ),
    "transition_places_the_weights_anew": (
        2,
        "random_transition_walk",
        ["cause:outputs-copied", "transition 1: the new state's ['weights', 'momentum']", "rows=1, batch=1"],
    ),
    "transition_jits_the_step": (
        2,
        "random_transition_walk",
        ["rule:one-update", "called the step it was given on tracers"],
    ),
    "reshuffle_widens_the_key": (
        1,
        "random_sampler_walk",
        ["rule:initial-fields", "call 2: next_batch returned a state with key a ndarray int64(2,)", "rows=1"],
    ),
    "next_batch_cached_by_array_id": (
        1,
        "random_sampler_walk",
        ["rule:pad-by-position", "raised by one in place", "kept between calls by the arrays' identity"],
    ),
    "next_batch_counts_epochs": (
        1,
        "batch_lengths_keep_the_remainder",
        ["cause:state-field-added", "`next_batch` returned a state with ['epoch']"],
    ),
    "restore_keeps_the_contract": (
        3,
        "restore_returns_every_field",
        ["cause:state-field-added", "`restore` returned a state with ['contract']"],
    ),
    "initial_returns_a_kept_state": (1, "initial_state_fields", ["cause:result-handed-out-again", "initial"]),
    "contract_returns_a_kept_dict": (3, "contract_is_json_data", ["cause:result-handed-out-again", "contract"]),
    "save_cleans_up_on_exception_only": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["cause:cleanup-misses-base-exceptions", "raised KeyboardInterrupt and left"],
    ),
    "save_cleans_up_on_the_interrupts_it_names": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["cause:cleanup-misses-base-exceptions", "raised ProcessEnding and left ['found/new', 'found/new/deeper'"],
    ),
    "save_enters_the_folder": (3, "save_syncs_before_publishing", ["cause:changes-working-directory"]),
    "save_fsync_only_small": (
        3,
        "save_syncs_before_publishing",
        ["cause:no-fsync-before-publish", "a save of 524288 rows"],
    ),
    "save_link_falls_back_to_rename": (
        3,
        "racing_saves_never_overwrite",
        [
            "rule:exclusive-publish",
            "every os.link raised EPERM",
            "with EPERM the save replaced the other saver's file",
            "rename .tmp-",
        ],
    ),
    "save_makedirs_after_isdir": (
        3,
        "racing_saves_never_overwrite",
        ["rule:exclusive-publish", "into one folder neither found", "File exists", "exist_ok=True"],
    ),
    "save_ignores_ctrl_c": (
        3,
        "restore_returns_every_field",
        [
            "rule:exact-path",
            "save called from a thread other than the main one raised ValueError",
            "set no signal handler",
        ],
    ),
    "restore_bounded_by_alarm": (
        3,
        "restore_returns_every_field",
        ["rule:exact-resume", "restore called from a thread other than the main one raised ValueError", "signal.alarm"],
    ),
    "save_normpath": (
        3,
        "save_syncs_before_publishing",
        ["rule:exact-path", "whose 'via' is a symbolic link", "wrote large/checkpoint.npz", "no os.path.normpath"],
    ),
    # a contract compared in part, under a checksum that refuses any contract edited in the file
    "restore_compares_the_expected_keys": (
        3,
        "restore_refuses_another_experiment",
        [
            "cause:contract-compared-in-part",
            "a member missing (schema_version",
            "a checkpoint its save wrote with one member more",
        ],
    ),
    "restore_compares_shared_keys_under_a_checksum": (
        3,
        "restore_refuses_another_experiment",
        ["cause:contract-compared-in-part", "saved with but one member more", "a member renamed (schema_version"],
    ),
    # a descriptor left open on a way out: a write that raises, a refusal after the temporary
    "save_leaves_its_file_open_on_error": (
        3,
        "save_errors_leave_the_folder_as_it_was",
        ["cause:left-open-on-error", "rule:new-temp-name", "its first write fails (its write raises ENOSPC)"],
    ),
    "save_refuses_after_its_temporary": (
        3,
        "save_never_overwrites",
        ["cause:left-open-on-error", "a save to a path that exists", "(deleted)"],
    ),
    "restore_refuses_unwritable_files": (
        3,
        "restore_returns_every_field",
        ["rule:exact-resume", "os.access W_OK checkpoint.npz", "never whether it may be written"],
    ),
    "step_reweights_local_means": (
        2,
        "count_is_exact_on_a_large_batch",
        ["cause:local-means-reweighted", "13, 13, 6, 0", "in 52 slots on 4 device(s)"],
    ),
    # stage 4: the eager and compiled steps
    "compiled_flag_ignored": (4, "eager_step_is_the_unjitted_mapped_body", ["compiled=False) is still jitted"]),
    "eager_without_shard_map": (4, "eager_step_is_the_unjitted_mapped_body", ["has no shard_map"]),
    "eager_differs": (4, "eager_step_matches_numpy", ["not another computation"]),
}
# Further checks a mistake must fail, with a phrase of each diagnosis: every check of the inventory is
# shown failing by some mistake, and diagnoses of one mistake agree with each other.
ALSO = {
    "momentum_saved_as_float16": {"restore_returns_every_field": "the saved momentum rounded to float16"},
    "restore_backslash_as_separator": {"invalid_arguments_are_refused": "a checkpoint at it read as '/': accepted"},
    "drop_remainder": {"every_epoch_covers_every_id_once": "remainder was dropped"},
    # no premise is taken for granted: no publication, no file at an extension-less path
    "save_naive_savez": {
        "racing_saves_never_overwrite": "both reported success",
        "save_leaves_only_the_final_file": "no file at the path given",
        "interrupted_save_leaves_nothing_or_a_checkpoint": "left an incomplete file",
    },
    "top_up_remainder": {"epochs_follow_the_course_order": "topped up"},
    "new_order_not_kept": {
        "every_epoch_covers_every_id_once": "the new order was not kept",
        "sampler_fields_follow_the_arithmetic": "the new order was not kept",
    },
    "global_rng": {"first_order_follows_the_seed": "global or unseeded RNG"},
    "pad_to_batch_size": {"padding_is_never_an_observation": "padded to 8 slots"},
    "local_count": {"replicas_agree": "the devices hold different weights"},
    "padding_counted": {"gradient_independent_of_device_count": "padding counted as observations"},
    "restore_resets_key": {"resume_continues_the_same_run": "first visible at step 9"},
    "eager_differs": {"eager_and_compiled_agree": "one computation"},
    "missing_factor_two": {"gradient_independent_of_device_count": "does not change with device count"},
    "restore_isnan_under_a_refusing_save": {
        "restore_refuses_damaged_checkpoints": "non-finite weights (+inf), the integrity hash recomputed"
    },
    "restore_finite_momentum_only_under_a_refusing_save": {
        "restore_refuses_damaged_checkpoints": "non-finite weights (NaN), the integrity hash recomputed"
    },
}
# mistakes whose named check tests/test_diagnosis_inputs.py runs, after showing the fault with NumPy and the course's
# own functions: the check is run and its diagnosis judged there, not again here
WITH_INPUTS = {
    *("contract_hashes_every_eighth_row", "restore_pops_the_contract", "save_expands_home"),
    *("contract_freezes_the_data", "save_removes_live_temporaries", "gradient_summed_twice", "gradient_squeezed"),
    *("contract_hashes_the_buffer", "save_moves_into_the_folder", "step_cached_by_device_count"),
    *("transition_fetches_the_weights", "restore_writes_into_the_contract"),
}
# The observed value a diagnosis names must be in the report too (expected and observed, not just words).
OBSERVED = {
    "restore_skips_validation": "cursor -1",
    "contract_ignores_data": "data bytes",
    "padding_not_finite": "slot 7: features [nan",
}
# The fresh-interpreter resume costs a child interpreter per run: it runs for the reference (which
# must pass it) and for the one mistake it must catch; the other stage 3 mistakes fail elsewhere.
FRESH = {"restore_resets_cursor"}


def said(result, wanted: str) -> bool:
    """Whether a failure names `wanted`: a `cause:ID` among its causes, a `rule:ID` among the rules of the mistake
    it diagnosed, or else a phrase in its diagnosis."""
    if wanted.startswith(causes.MARKER):
        return wanted.removeprefix(causes.MARKER) in result.causes
    if wanted.startswith(rules.MARKER):
        return wanted.removeprefix(rules.MARKER) in result.rules
    return wanted in result.diagnosis


def test_every_cause_named_is_known():
    """The cause ids MISTAKES asserts and every id the checker's sources mark are in checker/causes.py, and each
    known id is written in a source that marks it (a ranked formula's as its Cause id)."""
    asserted = {p.removeprefix(causes.MARKER) for _, _, ps in MISTAKES.values() for p in ps if p.startswith("cause:")}
    sources = "\n".join(p.read_text() for p in Path(formulas.__file__).parent.glob("*.py"))
    literal = set(re.findall(r'cause="([a-z0-9-]+)"', sources))
    ranked = {formulas.cause_id(i) for i in formulas.PRIOR} | {
        formulas.cause_id(c.id) for c in formulas.update_causes(*UPDATE_INPUTS)[1]
    }
    slots = {f"slots-{key}" for _, key in padding.SLOT_RULES}
    assert asserted <= set(causes.CAUSES), sorted(asserted - set(causes.CAUSES))
    assert literal | ranked | slots <= set(causes.CAUSES), sorted((literal | ranked | slots) - set(causes.CAUSES))
    written = set(re.findall(r'"([a-z0-9-]+)"', sources.replace(Path(causes.__file__).read_text(), "")))
    written |= set(re.findall(r'mark\("([a-z0-9-]+)"\)', Path(causes.__file__).read_text()))  # placements
    assert set(causes.CAUSES) <= written | ranked | slots, sorted(set(causes.CAUSES) - (written | ranked | slots))


UPDATE_INPUTS = ({"weights": np.zeros(2), "momentum": np.ones(2)}, np.ones(2), 0.03, 0.8, 4)


def check_cli(tmp_path, spec, stage) -> tuple[int, dict]:
    """`python -m shardlab check` as the CLI runs it (a child interpreter); (exit status, JSON report)."""
    out = tmp_path / "report"
    status = command.main(Namespace(implementation=str(spec), stage=str(stage), output=str(out)))
    return status, json.loads((out / command.REPORT).read_text())


@pytest.fixture
def starter_file(tmp_path):
    path = tmp_path / "my_model.py"
    assert starter.main(Namespace(path=str(path))) == 0
    return path


@pytest.mark.slow  # a child interpreter: make test's, not the inner loop's
def test_untouched_starter_fails_stage_1_with_not_implemented(tmp_path, starter_file):
    status, report = check_cli(tmp_path, starter_file, 1)
    assert status == 1 and report["passed"] is False
    assert {e["stage"] for e in report["checks"]} == {1}
    assert len(report["checks"]) == len(runner.STAGES[1].CHECKS)
    for entry in report["checks"]:
        assert not entry["passed"]
        assert "not implemented yet (stage 1)" in entry["diagnosis"]


def test_starter_refuses_to_overwrite(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("# my own work\n")
    assert starter.main(Namespace(path=str(path))) == 1
    assert path.read_text() == "# my own work\n"


def test_starter_loads_and_each_function_names_its_stage(starter_file):
    module = implementation.load(str(starter_file))
    dummies = {"make_step": (None,), "contract": (None, None)}
    for name, stage in STAGE_OF.items():
        arity = len(inspect.signature(getattr(module, name)).parameters)
        args = dummies.get(name, (None,) * arity)
        with pytest.raises(NotImplementedError, match=rf"{name}: not implemented yet \(stage {stage}\)"):
            getattr(module, name)(*args)


def test_starter_signatures_match_the_reference(starter_file):
    module = implementation.load(str(starter_file))

    def shape(function):
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert set(STAGE_OF) == set(implementation.API)
    for name in implementation.API:
        assert shape(getattr(module, name)) == shape(getattr(reference, name)), name


def test_mistakes_touch_only_their_stage():
    for mistake, (stage, _, _) in MISTAKES.items():
        module = implementation.load(str(BROKEN / f"{mistake}.py"))
        changed = [n for n in implementation.API if getattr(module, n) is not getattr(reference, n)]
        taught = {STAGE_OF[n] for n in changed}
        assert changed and (taught == {stage} or (stage == 4 and changed == ["make_step"])), (mistake, changed)


# mistakes only --thorough's probes meet: a million-row permutation is past the default run's time
THOROUGH_ONLY = {"initial_numpy_order_when_large"}


def test_every_broken_file_is_listed():
    assert sorted(p.stem for p in BROKEN.glob("*.py")) == sorted(MISTAKES)
    assert SLOW_MISTAKES < set(MISTAKES)  # a renamed mistake is not silently quick
    judged = (Path(__file__).parent / "test_diagnosis_inputs.py").read_text()
    assert WITH_INPUTS < set(MISTAKES) and all(f"broken/{name}.py" in judged for name in WITH_INPUTS)


# mistakes whose checks take seconds (a search that shrinks, saves killed and raced, fresh interpreters):
# never in `make test-quick`
SLOW_MISTAKES = {
    *("step_ignores_learning_rate", "loss_after_update", "contract_ignores_data", "contract_as_object", "decay_09"),
    *("restore_resets_key", "ema_momentum", "half_mse_loss", "momentum_before_reduction", "save_leaves_temp"),
    *("per_device_division", "save_replace_races", "save_lock_in_memory", "loss_counts_padding", "save_in_place"),
    *("save_fixed_temp_name", "checkpoint_without_momentum", "restore_skips_validation", "remainder_of_one_dropped"),
    *("transition_ignores_step", "missing_factor_two", "restore_skips_contract", "local_count"),
    *("restore_keeps_numpy_weights", "padding_counted", "save_overwrites", "restore_resets_cursor"),
    *("eager_step_ignores_hyperparameters", "contract_rounds_learning_rate", "contract_hashes_a_prefix"),
    "contract_rounds_to_ten_decimals",
    "contract_seven_significant_digits",
    *("initial_cached_by_seed", "save_stamps_the_contract", "restore_cached_by_path", "restore_permutation_by_sum"),
    "restore_places_on_first_devices",
    *("initial_places_on_first_devices", "batch_on_sorted_devices", "restore_scalars_by_size"),
    "batch_on_the_states_mesh",
    "momentum_saved_as_float16",
    "contract_shapes_as_tuples",
    # a stage 3 restore or save checked with its damage and save probes: seconds each, the inner loop's largest share
    *("restore_finite_via_sum", "restore_checks_fields_first", "restore_without_contract_member"),
    *("restore_accepts_nan_momentum", "restore_raises_value_error", "restore_compares_rounded_contract"),
    *("restore_compares_shared_keys", "restore_refuses_epoch_end", "restore_finite_by_magnitude", "contract_crc32"),
    "contract_hashes_printed_arrays",
    "step_mask_as_prefix",
    "step_cache_rounded_lr",
    "step_cached_by_number_types",
    "reshuffle_widens_the_key",
    "contract_converts_numpy_floats_only",
    *("step_type_tests_the_learning_rate", "restore_leaves_finiteness_to_the_checksum"),
    *("step_takes_only_float_learning_rates", "restore_checksum_and_finite_weights_only", "restore_checksum_and_isnan"),
    *("save_appends_npz_suffix", "save_keeps_host_copies", "save_replaces_empty_file", "save_temp_in_system_folder"),
    "save_fsync_before_write",
    *("save_publishes_before_fsync", "save_without_fsync", "contract_hashes_sorted_rows"),
    *("save_temp_named_by_process", "save_step_as_int16", "save_temp_named_by_pid_and_counter"),
    *("restore_isnan_under_a_refusing_save", "restore_finite_momentum_only_under_a_refusing_save"),
    *("save_naive_savez", "save_refuses_with_oserror", "restore_accepts_non_finite"),
    *("restore_reads_pickles", "save_returns_realpath", "transition_calls_step_twice"),
    *("gradient_summed_twice", "save_removes_live_temporaries", "contract_freezes_the_data"),
    *("restore_pops_the_contract", "restore_checks_shapes_before_contract", "restore_bounds_size_before_contract"),
    *("gradient_squeezed", "contract_hashes_the_buffer", "save_moves_into_the_folder", "save_expands_home"),
    "learning_rate_through_float16",
    # the inner loop's largest stage 1 and 2 cases: a probe of every data field, a process name, a compiled loss
    *("next_batch_reads_data_fields", "contract_names_the_process", "contract_hashes_a_str", "loss_expanded_square"),
    *("step_replicates_inputs", "drop_remainder"),
    *("restore_cached_by_path_and_contract", "save_joins_the_import_folder", "save_temp_named_after_the_target"),
    *("save_temp_from_a_seeded_generator", "save_publishes_in_a_thread", "save_part_written_outside_try"),
    "save_part_written_by_os_write",
    *("save_order_as_int16", "save_strips_the_name", "restore_order_of_its_own_length"),
    *("save_normalises_the_name", "contract_samples_large_data"),
    *("save_expands_variables", "restore_widens_the_key", "restore_counters_through_float32"),
    "restore_expands_variables",
    *("transition_fetches_the_weights", "restore_writes_into_the_contract", "save_renameat2_before_fsync"),
    *("contract_cached_by_array_id", "transition_jits_the_step", "initial_returns_a_kept_state"),
    *("contract_returns_a_kept_dict", "save_cleans_up_on_exception_only", "save_enters_the_folder"),
    "next_batch_cached_by_array_id",
    *("restore_falls_back_to_npz_name", "restore_reads_the_folders_checkpoint"),
    *("save_leaves_the_folder_open", "restore_leaves_the_file_open", "restore_caps_the_file_size"),
    *("reshuffle_cached_by_key", "initial_numpy_order_when_large", "gradient_drops_tiny_entries", "decay_clamped"),
    "loss_capped",
    *("save_fsync_only_small", "save_normpath", "save_link_falls_back_to_rename"),
    *("save_makedirs_after_isdir", "save_ignores_ctrl_c", "restore_bounded_by_alarm"),
    *("restore_reads_a_pattern", "save_strips_trailing_separator", "save_backslash_as_separator"),
    *("restore_clears_temporaries", "save_temp_named_by_state_id", "restore_backslash_as_separator"),
    *("restore_order_in_the_files_width", "restore_counters_as_numpy_scalars"),
    *("restore_compares_floats_closely", "contract_float32_hyperparameters"),
    *("save_cleans_up_on_the_interrupts_it_names", "restore_touches_the_file", "save_normalises_the_counters"),
    "save_undoes_its_folders_with_removedirs",
    "save_undoes_its_folders_with_rmtree",
    "restore_permutation_by_ends_and_sum",
    "restore_catches_the_read_errors_it_names",
    "transition_fetches_the_batch",
    "step_skips_psum_on_one_device",
    *("contract_hashes_the_memory_order", "contract_names_the_dtype_alone", "contract_records_the_folder"),
    "restore_keeps_the_contract",
    "transition_places_the_weights_anew",
}


# the two whose search walks longest before it finds and shrinks its case (an eager step; a damage a permutation's
# sum hides): never in the sample below
SEARCH_LONGEST = {"eager_step_ignores_hyperparameters", "restore_permutation_by_sum"}


def first_per_check(names) -> dict:
    """(stage, check) -> the first of `names`, in their order, that the check catches."""
    first = {}
    for name in names:
        first.setdefault(MISTAKES[name][:2], name)
    return first


# the first mistake listed for each check that is not in SLOW_MISTAKES, less the ones whose check still takes over a
# second of CPU with the inner loop's kept programs (seconds of damage and save probes, a search of the step):
# make test's, not the inner loop's
FIRST_QUICK = set(first_per_check(n for n in MISTAKES if n not in SLOW_MISTAKES).values())
OVER_A_SECOND = {
    *("contract_names_the_interpreter", "contract_hashes_the_pickle", "save_temp_before_checking"),
    *("save_temp_name_from_global_random", "restore_opens_before_checking", "restore_compares_contract_text"),
    *("step_reads_the_latest_hyperparameters", "top_up_remainder", "mutate_input"),
}
QUICK_MISTAKES = FIRST_QUICK - OVER_A_SECOND
# make test runs FIRST_QUICK and, for every other check, the first listed mistake it catches (never one whose search
# walks longest), so that each check of each stage fails for a planted mistake, and the FRESH one; make test-long
# runs every other mistake
SAMPLE = first_per_check([*sorted(FIRST_QUICK), *(n for n in MISTAKES if n not in SEARCH_LONGEST)])
SAMPLED_MISTAKES = set(SAMPLE.values()) | FRESH
LONG_MISTAKES = set(MISTAKES) - SAMPLED_MISTAKES
assert SEARCH_LONGEST <= LONG_MISTAKES and OVER_A_SECOND < FIRST_QUICK <= SAMPLED_MISTAKES


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(
            name,
            marks=[getattr(pytest.mark, f"stage{stage}")]
            + [pytest.mark.slow] * (name not in QUICK_MISTAKES)
            + [pytest.mark.long] * (name in LONG_MISTAKES),
        )
        for name, (stage, _, _) in MISTAKES.items()
        if name not in WITH_INPUTS
    ],
)
def test_mistake_is_caught_at_its_stage_with_its_diagnosis(mistake):
    stage, check, phrases = MISTAKES[mistake]
    wanted = {check, *ALSO.get(mistake, {}), *(("fresh_process_resume",) if mistake in FRESH else ())}
    skip = [c.__name__ for c in runner.STAGES[stage].CHECKS if c.__name__ not in wanted]  # keeps the suite quick
    results = runner.run_checks(
        str(BROKEN / f"{mistake}.py"), stage, only=True, skip=skip, thorough=mistake in THOROUGH_ONLY
    )
    failed = {r.name: r for r in results if not r.passed}
    assert check in failed, f"{mistake}: {check} passed; failures were {sorted(failed)}"
    if mistake in FRESH:
        assert "fresh_process_resume" in failed and "in a fresh interpreter" in failed["fresh_process_resume"].diagnosis
    assert {r.stage for r in results} == {stage}
    for phrase in phrases:
        assert said(failed[check], phrase), failed[check]
    assert failed[check].expected != failed[check].observed
    for other, phrase in ALSO.get(mistake, {}).items():
        assert other in failed and phrase in failed[other].diagnosis, (other, failed.get(other))
    if mistake in OBSERVED:
        assert OBSERVED[mistake] in str(failed[check].observed), failed[check]


CORRECT = Path(__file__).parent / "correct"
RANDOMISED = [c.__name__ for m in runner.STAGES.values() for c in m.CHECKS if c.__name__.startswith("random_")]


# The stages each alternative changes: those teaching what it replaces, stage 4 for a new step and stage 3
# (the resume proof runs every function) for a new sampler. Every check of every stage, for every file in
# tests/correct/, is `make test-alternatives`'s (tests/alternatives_all.py); here only the checkpoint
# alternatives' fresh-interpreter resume, and the search's 20 seeds there use the stages below 4 of these.
def judged_at(module) -> list[int]:
    replaced = {STAGE_OF[n] for n in implementation.API if getattr(module, n) is not getattr(reference, n)}
    return sorted(replaced | ({4} if 2 in replaced else set()) | ({3} if 1 in replaced else set()))


@pytest.mark.slow  # fresh interpreters
def test_correct_checkpoint_alternatives_resume_in_a_fresh_interpreter():
    """The checkpoint alternatives resume in a fresh interpreter (make test-alternatives runs every other check)."""
    others = [c.__name__ for c in runner.checks_of(3) if c.__name__ != "fresh_process_resume"]
    for alternative in ("nested_contract", "replace_under_lock"):
        assert 3 in judged_at(implementation.load(str(CORRECT / f"{alternative}.py"))), alternative
        results = runner.run_checks(str(CORRECT / f"{alternative}.py"), 3, only=True, skip=others)
        assert [r.name for r in results] == ["fresh_process_resume"] and results[0].passed, (alternative, results)


def test_every_check_has_a_broken_implementation_that_fails_it():
    """The inventory's promise: no check exists that no known mistake can make fail."""
    caught = {check for _, check, _ in MISTAKES.values()} | {c for also in ALSO.values() for c in also}
    caught |= {"fresh_process_resume"} if FRESH else set()
    never = [c.__name__ for m in runner.STAGES.values() for c in m.CHECKS if c.__name__ not in caught]
    # compiled_step_lowers_and_compiles repeats step_is_sharded's probe at stage 4 (not_sharded fails both)
    assert never == ["compiled_step_lowers_and_compiles"]


@pytest.mark.slow  # two child interpreters: make test's, not the inner loop's
def test_an_import_error_is_printed_with_file_and_line(tmp_path, capfd):
    broken = tmp_path / "mine.py"
    broken.write_text("import numpy as np\n\n\ndef initial(seed, data, mesh:\n    return {}\n")
    status = command.main(Namespace(implementation=str(broken), stage="1", output=None))
    shown = capfd.readouterr().out
    assert status == 1
    assert f"{broken}:4" in shown and "SyntaxError" in shown and "def initial(seed, data, mesh:" in shown
    missing = tmp_path / "imports.py"
    missing.write_text("import numpy\nimport a_module_nobody_installed\n")
    assert command.main(Namespace(implementation=str(missing), stage="1", output=None)) == 1
    shown = capfd.readouterr().out
    assert f"{missing}:2" in shown and "No module named 'a_module_nobody_installed'" in shown


@pytest.mark.parametrize("kind", ["markdown", "folder", "missing"])
def test_check_names_what_it_expected_instead_of_a_file(tmp_path, capfd, kind):
    target = {"markdown": tmp_path / "README.md", "folder": tmp_path, "missing": tmp_path / "nope.py"}[kind]
    if kind == "markdown":
        target.write_text("# notes\n")
    assert command.main(Namespace(implementation=str(target), stage="1", output=None)) == 2
    said = capfd.readouterr().err
    wanted = {"markdown": "is not a Python file", "folder": "is a folder", "missing": "does not exist"}[kind]
    assert wanted in said and "expected 'reference' or" in said and "python -m shardlab starter" in said


@pytest.mark.slow  # the command line's child interpreter and a check here: make test's, not the inner loop's
def test_check_here_prints_the_command_line_verdict(tmp_path, capfd):
    from shardlab.checker import check_here

    spec = str(BROKEN / "drop_remainder.py")
    status = command.main(Namespace(implementation=spec, stage="1", output=str(tmp_path / "cli"), fresh=True))
    cli_lines = capfd.readouterr().out.splitlines()
    report = check_here(spec, 1)
    here_lines = capfd.readouterr().out.splitlines()
    assert status == 1 and report["passed"] is False
    cli_report = json.loads((tmp_path / "cli" / command.REPORT).read_text())
    pick = {"name", "passed", "diagnosis", "expected", "observed"}
    searched = {c.__name__ for c in runner.STAGES[1].CHECKS if c.__name__.startswith("random_")}
    assert searched and set(report["left_out"]) == searched  # the search is make check's, not a cell's
    same = [{k: e[k] for k in pick} for e in cli_report["checks"] if e["name"] not in searched]
    assert [{k: e[k] for k in pick} for e in report["checks"]] == same
    assert len(same) == len(cli_report["checks"]) - len(searched)
    assert any(line.startswith("make check IMPL=<your file> STAGE=1 ") for line in here_lines)  # where the search is
    failing = [line for line in here_lines if line.startswith("FAIL")]
    assert failing and all(any(line.split("(")[0] in c for c in cli_lines) for line in failing)
    assert len(failing) == sum(not e["passed"] for e in report["checks"])  # every failure has its line
    assert not [line for line in here_lines if line.startswith("PASS")]  # a passed check is in the counts alone
    passed = sum(e["passed"] for e in report["checks"])
    assert f"stage 1: {passed} of {len(report['checks'])} checks passed" in here_lines
    assert "first failure to fix: batch_lengths_keep_the_remainder (stage 1)" in here_lines


@pytest.mark.slow  # the search and its shrinking, from the command line
def test_cli_prints_the_minimal_case_and_its_reproduction(tmp_path, capfd):
    spec = BROKEN / "pad_extra_when_multiple.py"
    status = command.main(
        Namespace(implementation=str(spec), stage="1", only=True, output=str(tmp_path / "out"), seed=7)
    )
    shown = capfd.readouterr().out
    assert status == 1 and "search seed 7" in shown and "(reproduce with --seed 7)" in shown
    assert f'check_case("{spec}", "sampler_walk", rows=1, batch=1, devices=1, features=1' in shown
    report = json.loads((tmp_path / "out" / command.REPORT).read_text())
    failed = {e["name"]: e for e in report["checks"] if not e["passed"]}
    assert "random_sampler_walk" in failed and failed["random_sampler_walk"]["expected"]["minimal case"]["rows"] == 1
    walk = failed["random_sampler_walk"]
    assert "minimal case" not in walk["observed"]  # the case is printed once
    # a sampler walk takes no learning rate, decay or checkpoint: those keys mean nothing for it
    assert not {"learning_rate", "decay", "save_at", "path", "file_name"} & set(walk["expected"]["minimal case"])
    assert shown.count('"minimal case"') == 1


HOSTILE = {  # body of a learner's `initial` -> what the verdict for it must say
    "loop": ("    while True:\n        pass", "`initial` did not return within 2 s"),
    "memory": ("    hog = []\n    while True:\n        hog.append(np.ones(10**7))", "`initial` used more than 300 MB"),
    "exit": ("    os._exit(7)", "`initial` ended the interpreter running it with exit status 7"),
    "segfault": ("    ctypes.string_at(0)", "`initial` ended the interpreter running it: killed by SIGSEGV"),
    "shout": ("    while True:\n        print('A' * 200)", "`initial` wrote more than 0.191 MB to the console"),
}


@pytest.mark.slow  # a supervised interpreter per case; the loop waits out its bound
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_untrusted_code_gets_a_named_verdict_within_the_bound(tmp_path, capfd, kind):
    from shardlab.checker import watch

    body, verdict = HOSTILE[kind]
    spec = tmp_path / f"{kind}.py"
    spec.write_text(
        "import ctypes\nimport os\n\nimport numpy as np\n\nfrom shardlab.learner.reference import *  # noqa\n\n\n"
        f"def initial(seed, data, mesh):\n{body}\n"
    )
    # Only the bound under test can be reached first: `initial` in the hog or the flood runs under a 60 s call
    # bound, so the child's own alarm cannot stop the call (and leave the flood to be seen between two checks)
    # before the supervisor, polling every 50 ms, sees the memory or the log pass its bound, however loaded the
    # machine; a 2 s bound for the others keeps the loop's test short.
    seconds = 60 if kind in ("memory", "shout") else 2
    bounds = watch.Bounds(seconds, memory_bytes=300 * 1024**2, output_bytes=200_000, total_seconds=240)
    out = tmp_path / "out"
    args = Namespace(implementation=str(spec), stage="1", only=True, output=str(out), bounds=bounds)
    assert command.main(args) == 1
    shown = capfd.readouterr().out
    report = json.loads((out / command.REPORT).read_text())  # always written, whatever the child did
    assert len(report["checks"]) == len(runner.STAGES[1].CHECKS)
    first = report["checks"][0]
    assert first["name"] == "initial_state_fields" and verdict in first["diagnosis"], first
    assert all(not e["passed"] and verdict in e["diagnosis"] for e in report["checks"])
    assert verdict in shown and len(shown) < 60_000  # a flood never reaches the console
    if kind == "shout":
        assert (out / "check_output.log").stat().st_size > 200_000 and "printed" in shown


def test_what_one_files_contract_writes_into_the_huge_dataset_never_reaches_a_later_run():
    """The huge pair of datasets is built once per process; each run hands its learner copies. The checker writes a
    learner's in-place changes back into the arrays it passed (as the learner's caller would see them), so a run
    given the kept arrays themselves would leave them changed for every later run in this process (xdist worker)."""
    from types import SimpleNamespace

    from shardlab.checker import properties

    kept = [array.copy() for dataset in properties._huge_pair() for array in dataset]

    def contract(data, config):  # scales the caller's features in place, as a learner "saving memory" would
        data[0][...] *= 2
        return reference.contract(data, config)

    ctx = SimpleNamespace(impl=SimpleNamespace(contract=contract), cache={})
    with pytest.raises(properties.Miss, match="changed its caller's inputs"):
        properties._huge_ignored(ctx)
    now = [array for dataset in properties._huge_pair() for array in dataset]
    assert all(np.array_equal(a, b) for a, b in zip(kept, now))


@pytest.mark.parametrize("third, rule", [({"data": 1}, "contract-pins"), ({"data": 3}, "contract-json")])
def test_a_contract_unlike_the_first_for_fresh_copies_names_its_rule_whichever_way_it_differs(third, rule):
    """Fresh copies of the data gave another contract than the first call. Given the first call's arrays again, a
    contract kept by their identity answers as the first time (contract-pins: read the bytes at every call); one that
    changes from call to call answers otherwise (contract-json): either way the failure names a rule."""
    from types import SimpleNamespace

    from shardlab.checker import properties
    from shardlab.checker.domain import Case, data_for

    case = Case()
    ctx = SimpleNamespace(impl=SimpleNamespace(contract=lambda data, config: dict(third)))
    with pytest.raises(properties.Miss) as found:
        properties._same_experiment_told_apart(ctx, case, data_for(case), {"data": 1}, {"data": 2})
    assert found.value.why.count("{rule:") == 1 and f"{{rule:{rule}}}" in found.value.why, found.value.why


def test_docs_state_the_domain_the_damage_space_and_every_randomised_check():
    """docs/checker.md prints the tables the search is driven by: none of their rows may go missing."""
    from shardlab.checker import damage, domain, search

    text = (Path(__file__).parents[1] / "docs" / "checker.md").read_text()
    label = {"batch": "batch size", "learning_rate": "learning rate", "save_at": "save point", "path": "save path"}
    label.update(data_form="data form", file_name="file name")
    for name in (n for n in domain.DOMAIN if n != "fixture"):  # the fixtures are in the rows row
        assert f"| {label.get(name, name)} |" in text, name
    for field, kind, _, _ in damage.DAMAGES:
        assert f"`{field}`" in text or field == "every field", field
        assert kind in text or kind == "missing", kind
    assert all(kind.split("'")[0] in text for kind in ("truncated", "not an NPZ", "another experiment"))
    for name in search.PROPERTIES:
        assert f"`random_{name}`" in text, name
    assert "`contracts_agree_in_a_fresh_process`" in text


def test_check_case_reproduces_a_minimal_case_in_this_interpreter(capfd):
    from shardlab.checker.search import check_case

    assert check_case("reference", "sampler_walk", rows=3, batch=2, devices=3, features=2)["passed"]
    with pytest.raises(AssertionError, match="padded to 2 slots"):
        check_case(str(BROKEN / "pad_extra_when_multiple.py"), "sampler_walk", rows=1, batch=1, devices=1, features=1)
    shown = capfd.readouterr().out
    assert (
        "PASS  sampler_walk  3 row(s) x 2 feature(s), batch 2, 3 device(s)" in shown and "FAIL  sampler_walk" in shown
    )


# Held-out implementations written by someone who had not read the checks (tests/heldout/, measured by
# tests/heldout/measure.py into generality.json). Each wrong file that the enumerated probes let through
# must be caught by the randomised check that caught it there: `make test-heldout` (tests/heldout_all.py)
# runs that check for each of them. The files are made from their base and one diff each when the tests
# run (tests/heldout/files.py).
HELDOUT = Path(__file__).parent / "heldout"
GENERALITY = json.loads((HELDOUT / "generality.json").read_text())
# set 1's files measured as correct and found wrong after that run, each with the check that now catches it
FOUND_WRONG_AFTER = {f"wrong/{w['file']}": (w["stage"], w["caught_by"]) for w in GENERALITY["found_wrong_after"]}
# the second set (written later by another engineer, measured blind first): generality2.json keeps both runs
GENERALITY2 = json.loads((HELDOUT / "generality2.json").read_text())["after"]
# the third set (README3.md): its blind measurement on the checker before it, and the checker now
GENERALITY3 = json.loads((HELDOUT / "generality3.json").read_text())["after"]
SEARCH_ONLY = {
    f"{folder}/{w['file']}": w["search"][0]
    for folder, measured in (("wrong", GENERALITY), ("wrong2", GENERALITY2), ("wrong3", GENERALITY3))
    for w in measured["wrong"]
    if w["search"] and not w["enumerated"]
}


@pytest.mark.parametrize("measured, suffix", [(GENERALITY, ""), (GENERALITY2, "2"), (GENERALITY3, "3")])
def test_every_held_out_file_was_measured(measured, suffix, heldout):
    after = [w["file"] for w in measured.get("found_wrong_after", [])]
    assert sorted([*(w["file"] for w in measured["wrong"]), *after]) == sorted(
        p.name for p in (heldout / f"wrong{suffix}").glob("*.py")
    )
    assert sorted(c["file"] for c in measured["correct"]) == sorted(
        p.name for p in (heldout / f"correct{suffix}").glob("*.py")
    )
    # no check rejects a correct held-out file
    rejected = [(c["file"], n) for c in measured["correct"] for n in c["failed"]]
    assert not rejected, rejected


@pytest.mark.slow
@pytest.mark.stage3
@pytest.mark.parametrize("name", sorted(FOUND_WRONG_AFTER))
def test_a_held_out_file_found_wrong_after_its_measurement_is_caught(name, heldout):
    stage, check = FOUND_WRONG_AFTER[name]
    skip = [c.__name__ for c in runner.STAGES[stage].CHECKS if c.__name__ != check]
    results = runner.run_checks(str(heldout / name), stage, only=True, skip=skip)
    failed = {r.name: r for r in results if not r.passed}
    assert check in failed, f"{name}: {check} passed"
    assert "first write fails" in failed[check].diagnosis and ".part'] behind" in failed[check].diagnosis


def test_the_supervising_command_starts_without_jax():
    """`python -m shardlab check` only supervises: its module (and `import shardlab`) import no JAX, nor do the
    summary and the report it writes from the checking interpreter's results and environment."""
    import subprocess
    import sys

    from shardlab.checker import command

    assert command.STAGE_NUMBERS == tuple(sorted(runner.STAGES))
    result = {"name": "x", "stage": 1, "passed": True, "expected": 1, "observed": 1, "diagnosis": "", "seconds": 0.0}
    code = (
        "import sys, shardlab, shardlab.checker.command as command, shardlab.__main__\n"
        f"command.summary([{result!r}]); command.report('reference', [{result!r}], {{'jax': 'the child'}})\n"
        "print('jax' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "False"


def test_the_supervising_command_claims_and_publishes_its_output_folder_without_numpy(tmp_path):
    """`check --output` claims its folder before it starts the checking interpreter, and publishes the report in
    it: neither imports NumPy or JAX into the supervisor (the checking interpreter's start would wait for them)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    code = (
        "import sys, shardlab.__main__, shardlab.checker.command, shardlab.outdir as outdir\n"
        f"outdir.claim({str(out)!r}, 'check')\n"
        f"with outdir.writing({str(out)!r}, 'check') as staging:\n"
        "    (staging / 'check_report.json').write_text('{}')\n"
        "print(sorted(name for name in ('numpy', 'jax') if name in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "[]"
    assert (out / "check_report.json").read_text() == "{}"  # published, so the claim and the writing both ran


def test_the_checking_interpreter_prints_every_verdict_and_ends_with_its_status(tmp_path):
    """`python -m shardlab.checker` on its own: each verdict on its console, then exit status 0 for a pass and 1
    for a failure (it ends without the interpreter's teardown, so nothing may be left unwritten)."""
    import subprocess
    import sys

    broken = tmp_path / "broken.py"
    broken.write_text("def initial(:\n", encoding="utf-8")
    kept = ["batch_is_placed_on_the_mesh"]
    skip = json.dumps([check.__name__ for check in runner.checks_of(1) if check.__name__ not in kept])
    found = {}
    for spec in ("reference", str(broken)):
        command = [sys.executable, "-B", "-m", "shardlab.checker", "--implementation", spec, "--stage", "1"]
        run = subprocess.run([*command, "--only", "--skip", skip], capture_output=True, text=True, timeout=300)
        found[spec] = run.returncode, [line for line in run.stdout.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert found["reference"][0] == 0
    assert [line.split()[:4] for line in found["reference"][1]] == [["PASS", "stage", "1", *kept]]
    assert found[str(broken)][0] == 1
    assert [line.split()[:4] for line in found[str(broken)][1]] == [["FAIL", "stage", "1", "implementation_loads"]]


# Meshes that are not a prefix of jax.devices(): where each part of an array lives, worked out here from the mesh's
# device order alone (device i of a k-device mesh holds rows i*n/k .. (i+1)*n/k of a split array, all of a
# replicated one), against JAX's own record of the placed array's shards.
def _rows_by_device(mesh_ids: list, rows: int, split: bool) -> dict:
    k = len(mesh_ids)
    return {d: ((i * rows // k, (i + 1) * rows // k) if split else (0, rows)) for i, d in enumerate(mesh_ids)}


@pytest.mark.parametrize("placed_on, given", [([3, 2], [2, 3]), ([1, 3, 0, 2], [0, 1, 2, 3]), ([2, 3], [2, 3])])
def test_a_placement_is_judged_by_which_device_holds_which_rows(placed_on, given):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardlab.checker.common import sharding_of

    every = jax.devices()
    mesh_of = {tuple(ids): Mesh(np.array([every[i] for i in ids]), ("data",)) for ids in (placed_on, given)}
    rows = np.arange(8 * len(given), dtype=np.float32).reshape(-1, 2)
    for spec, split in ((P("data", None), True), (P("data"), True), (P(), False)):
        x = jax.device_put(rows, NamedSharding(mesh_of[tuple(placed_on)], spec))
        held = {s.device.id: (s.index[0].start or 0, s.index[0].stop or len(rows)) for s in x.addressable_shards}
        assert held == _rows_by_device(placed_on, len(rows), split)  # JAX agrees with the arithmetic
        same = held == _rows_by_device(given, len(rows), split)
        found = sharding_of(x, mesh_of[tuple(given)], P("data", None) if split else P())
        assert (found is None) == same, (spec, found)
        if not same:  # the mesh's own devices in another order: the placement mistake named by its id
            assert causes.placement(found) == causes.mark("other-device-order"), found


def test_every_search_that_gives_a_mesh_meets_meshes_that_are_not_a_prefix():
    from shardlab.checker import domain, search

    for name in ("sampler_walk", "step_update", "transition_walk", "restore_damage"):
        prop = search.PROPERTIES[name]
        cases = search.cases_for(prop, 2026, prop.cases)
        held = {domain.mesh_positions(c.layout, c.devices) for c in cases}
        assert any(p != tuple(range(len(p))) for p in held), (name, held)  # some mesh is not jax.devices()[:k]


def test_every_restore_search_visits_each_path_form_and_save_point():
    from shardlab.checker import search

    prop = search.PROPERTIES["restore_damage"]
    for seed in range(48):
        cases = search.cases_for(prop, seed, prop.cases)
        assert {c.path for c in cases} == {"bare", "nested", "other", "home"}, seed  # "~/runs/..." included
        assert {c.save_at for c in cases} == {"start", "end", "mid"}, seed


def test_the_structure_space_holds_every_same_size_shape_and_every_ruled_out_dtype():
    """The rule: weights and momentum float32 (d,), key uint32 (2,), order integer ids (n,), cursor and step 0-d
    integers. Every other shape of the same size is in each field's space, and every form in it breaks the rule
    while holding the same numbers (or their text)."""
    import numpy as np

    from shardlab.checker import damage

    values = {"weights": np.zeros(3, np.float32), "key": np.zeros(2, np.uint32), "cursor": np.asarray(5, np.int64)}
    values.update(momentum=values["weights"], order=np.arange(4, dtype=np.int32), step=np.asarray(0, np.int64))

    def allowed(field: str, m) -> bool:
        if field in ("weights", "momentum"):
            return m.dtype == np.float32 and m.shape == (3,)
        if field == "key":
            return m.dtype == np.uint32 and m.shape == (2,)
        return m.dtype.kind in "iu" and m.shape == values[field].shape

    for field, value in values.items():
        made = [np.asarray(change(value, 4)) for _, _, change in damage.structures(field, value)]
        shapes = {m.shape for m in made if m.dtype == value.dtype}
        assert shapes == ({(1,), (1, 1)} if value.ndim == 0 else {(1, value.size), (value.size, 1)}), (field, shapes)
        for m in made:
            assert not allowed(field, m), (field, m.dtype, m.shape)
            if m.dtype.kind != "U":
                assert np.array_equal(m.ravel().astype(np.complex128), value.ravel().astype(np.complex128)), field


def test_an_exception_from_jax_is_explained_by_its_cause():
    """Real errors of the pinned JAX: a donated (deleted) array, rows that do not split over a mesh, arrays on two
    meshes in one computation. Each is named by its cause and the rules it breaks."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardlab.checker import diagnoses

    every = jax.devices()
    errors = {}
    deleted = jax.device_put(np.ones(3, np.float32))
    deleted.delete()
    with pytest.raises(Exception) as found:
        np.asarray(deleted)
    errors["input-intact"] = found.value
    three = Mesh(np.array(every[:3]), ("data",))
    with pytest.raises(Exception) as found:
        jax.device_put(np.ones(4, np.float32), NamedSharding(three, P("data")))
    errors["pad-by-position"] = found.value
    first, last = (Mesh(np.array(d), ("data",)) for d in (every[:2], every[2:]))
    a = jax.device_put(np.ones(2, np.float32), NamedSharding(first, P()))
    b = jax.device_put(np.ones(2, np.float32), NamedSharding(last, P()))
    with pytest.raises(Exception) as found:
        jax.jit(lambda x, y: x + y)(a, b)
    errors["replicated"] = found.value
    for rule, error in errors.items():
        text = diagnoses.explain(error)
        _, marked = runner.marked_rules(text)
        assert rule in marked and text.startswith(": "), (rule, type(error).__name__, str(error)[:200], text)


def test_a_refused_same_experiment_names_both_causes_that_fit():
    """ContractMismatchError from restore on the checkpoint of the same experiment fits two mistakes: a contract
    that changes between calls or processes, and a comparison that refuses equal contracts. Both are named."""
    from shardlab import errors
    from shardlab.checker import diagnoses

    text = diagnoses.explain(errors.ContractMismatchError("another experiment"), "my_model.py:80 in restore")
    assert "it fits 2 mistakes, most likely first" in text, text
    assert text.index("(1)") < text.index("salted per process") < text.index("(2)") < text.index("refuses two equal")
    _, marked = runner.marked_rules(text)
    assert {"contract-json", "contract-first"} <= set(marked)
    assert diagnoses.explain(errors.ContractMismatchError("x"), "my_model.py:9 in save") == ""  # not restore's


@pytest.mark.parametrize("seed", range(20))
def test_contract_search_draws_neighbours_exactly_one_float32_step_apart(seed):
    """Every pair the contract search compares is two float32 values whose bit patterns differ by one, and each
    seed's draw holds a pair that seven significant digits write alike (the class a rounded contract falls in)."""
    from shardlab.checker.domain import Case
    from shardlab.checker.properties import magnitude_pairs

    pairs = magnitude_pairs(Case(seed=seed))
    merged_by_seven_digits = []
    for what, first, second in pairs:
        name = "learning_rate" if what.startswith("learning rate") else "decay"
        a, b = getattr(first, name), getattr(second, name)
        assert float(np.float32(a)) == a and float(np.float32(b)) == b, what
        bits = np.array([a, b], dtype=np.float32).view(np.int32).astype(np.int64)
        assert abs(bits[0] - bits[1]) == 1, what  # positive float32 values are ordered like their bit patterns
        merged_by_seven_digits.append(f"{a:.7g}" == f"{b:.7g}")
    assert any(w.startswith("learning rate") for w, _, _ in pairs) and any(w.startswith("decay") for w, _, _ in pairs)
    assert any(merged_by_seven_digits), pairs


def test_every_step_search_draws_every_content_and_the_un_jitted_step_meets_each_over_seeds():
    from shardlab.checker import domain, search

    prop, eager = search.PROPERTIES["step_update"], set()
    for seed in range(64):
        cases = search.cases_for(prop, seed, prop.cases)
        assert {c.contents for c in cases} == set(domain.CONTENTS), seed  # "mask with gaps" and "course" included
        assert any(not c.compiled for c in cases), seed
        eager |= {c.contents for c in cases if not c.compiled}
    assert eager == set(domain.CONTENTS)


def test_the_hidden_ulp_edit_moves_one_element_one_ulp_that_numpy_prints_alike():
    import numpy as np

    from shardlab.checker import properties
    from shardlab.core.fixtures import Dataset

    def printed(array):
        return np.array2string(array, threshold=array.size + 1)

    rng = np.random.default_rng(5)
    own = Dataset(rng.normal(size=(40, 3)).astype(np.float32), rng.normal(size=40).astype(np.float32))
    one = Dataset(np.float32([[1.0]]), np.float32([-1.5]))  # no element of its own hides its ulp
    assert all(printed(np.nextafter(a, np.float32(9))) != printed(a) for a in one)
    for data in (own, one, Dataset(np.float32([[2.5, -9.0]]), np.float32([0.0]))):
        for part in ("features", "targets"):
            for start in range(getattr(data, part).size):
                first, second = properties._hidden_ulp(data, part, start)
                before, after = getattr(first, part), getattr(second, part)
                changed = np.flatnonzero(before != after)
                assert len(changed) == 1
                assert after.flat[changed[0]] == np.nextafter(before.flat[changed[0]], np.float32(9))
                assert printed(before) == printed(after)  # NumPy prints both alike, fixed notation kept
                assert "e" not in printed(before)
                moved = np.flatnonzero(before != getattr(data, part))  # the first dataset: the data, or one element set
                assert len(moved) <= 1 and (first is data) == (len(moved) == 0)
                other = "targets" if part == "features" else "features"
                assert np.array_equal(getattr(first, other), getattr(data, other))
    assert properties._hidden_ulp(own, "features", 0)[0] is own  # the data's own hidden ulp comes first
    # data too large for fixed notation to hide an ulp (NumPy would print exponents): nothing is drawn
    assert properties._hidden_ulp(Dataset(np.float32([[1e3]]), np.float32([1.0])), "features", 0) is None


def test_a_result_changed_by_a_later_call_is_named_by_function_place_and_rule():
    """The worker's guard keeps what each call returned: a restored state whose momentum is a buffer the next
    restore refills fails that next call, naming the earlier call, the array's place and the rule it breaks;
    results that keep their values, and a guard outside the worker, raise nothing."""
    import numpy as np

    from shardlab.checker import guard

    buffer = np.zeros(3, np.float32)

    def restore(value):
        buffer[:] = value
        return {"momentum": buffer, "step": np.array(int(value))}

    def fresh(value):
        return {"momentum": np.full(3, value, np.float32)}

    kept = guard.Guard(worker=True)
    for value in (1.0, 2.0, 3.0):  # new arrays every call: nothing changes
        kept.call("restore", fresh, value)
    kept.call("restore", restore, 1.0)
    with pytest.raises(guard.ResultChanged) as raised:
        kept.call("restore", restore, 2.0)
    said = str(raised.value)
    assert "`restore` returned an array (its result['momentum'], [1., 1., 1.])" in said, said
    assert "changed to [2., 2., 2.]" in said and "{rule:exact-resume}" in said, said
    assert isinstance(raised.value, guard.Overrun)  # a BaseException: no `except Exception` in a check hides it
    outside = guard.Guard()  # a kernel or check_case: the caller's own code may hold and change what it got
    outside.call("restore", restore, 1.0)
    outside.call("restore", restore, 2.0)


def test_repeats_of_a_stopped_functions_diagnosis_print_as_one_line_with_their_count():
    """Five checks fail because `restore` was stopped once: the first says why in full; the four that repeat it word
    for word become one line naming them; a different failure is still printed whole."""
    from shardlab.checker.command import Echo, Result
    from shardlab.checker.guard import NOT_AGAIN

    lines = []
    echo = Echo(lambda text, flush: lines.append(text))
    stopped = f"`restore` did not return within 20 s; {NOT_AGAIN}"
    names = [f"check_{n}" for n in range(5)]
    for name in names[:3]:
        echo(Result(name, 3, False, "a", "b", stopped, 0.0))
    echo(Result("other", 3, False, "a", "b", "a different mistake", 0.0))
    for name in names[3:]:
        echo(Result(name, 3, False, "a", "b", stopped, 0.0).__dict__)
    echo.close()
    shown = "\n".join(lines)
    assert shown.count(stopped) == 1 and "a different mistake" in shown
    assert lines[-1].startswith(f"FAIL  {len(names) - 1} more check(s) with check_0's diagnosis"), lines[-1]
    assert all(f"{name} (stage 3)" in lines[-1] for name in names[1:]), lines[-1]


def test_damaged_copies_of_unsigned_counters_and_ids_hold_minus_one():
    """A save may store cursor, step and ids unsigned (they are never negative); the damaged copies that put -1 there
    store it in a signed type instead of failing to build."""
    from shardlab.checker import damage

    saved = {
        "cursor": np.asarray(3, np.uint64),
        "step": np.asarray(5, np.uint64),
        "order": np.arange(4, dtype=np.uint32),
    }
    for field, kind, _, change in damage.DAMAGES:
        if field in saved and "-1" in kind:
            damaged = change(saved[field], 4)
            assert damaged.dtype.kind == "i" and -1 in np.ravel(damaged), (field, kind, damaged)
