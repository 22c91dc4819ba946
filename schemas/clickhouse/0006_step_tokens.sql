-- The engine's step size while a request ran (enrich/join, "The join" in
-- DESIGN.md): the token-weighted mean number of tokens per engine step,
-- from the step-size histogram vLLM exports (vllm:iteration_tokens_total).
-- Large prefills batched with a request's decodes raise it; chunked prefill
-- caps it at the step budget. NaN where the engine exports no such
-- histogram, and in rows written before this migration.

ALTER TABLE requests ADD COLUMN IF NOT EXISTS engine_step_tokens Float64 DEFAULT nan AFTER engine_mean_output_tokens;
