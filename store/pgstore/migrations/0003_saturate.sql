-- Budget counters saturate at 2^53 (sluice.CounterCeiling), as every
-- store's do: a bigint sum past 2^63 would fail the statement, and with it
-- the whole group of admissions and settlements.
--
-- The store sends every budget amount, actual and limit clamped to
-- [0, 2^53], and the counters hold figures within it (Open repairs any
-- that do not), so every sum below is of two figures of at most 2^53 and
-- fits a bigint; least(.., 2^53) keeps the result there. The functions are
-- 0002's sluice_apply, 0001's sluice_admit (Peek's, and with
-- sluice_settle, the admissions of replicas of the version before 0002
-- during an upgrade) and sluice_sweep, each changed only where a budget's
-- usage or reservations are summed.

CREATE OR REPLACE FUNCTION sluice_apply(
	p_now bigint[], p_settle boolean[], p_batch bigint[], p_ttl bigint[], p_row boolean[], p_first int[],
	p_rows bigint[], k_rule bigint[], k_subject text[], k_period bigint[],
	p_key int[], p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_actual bigint[], p_shadow boolean[], p_release boolean[],
	OUT done boolean[], OUT allowed boolean[], OUT remaining bigint[], OUT used bigint[],
	OUT retry_after bigint[], OUT reset_at bigint[])
LANGUAGE plpgsql
-- Its joins are between a group's keys (tens) and the counters by primary
-- key: a nested loop over the index, whatever the table's statistics say (a
-- hash join would read the whole table for each group), and planned once
-- per connection: a custom plan per call, which PL/pgSQL would keep making
-- as the arrays' sizes vary, would cost more CPU than the rest of the call.
SET enable_hashjoin = off SET enable_mergejoin = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
	nops      int := coalesce(array_length(p_batch, 1), 0);
	nch       int := coalesce(array_length(p_kind, 1), 0);
	nk        int := coalesce(array_length(k_rule, 1), 0);
	db_now    bigint := sluice_now();
	huge      numeric := 4611686018427387904; -- 2^62, memstore's bound on a quotient
	ceiling   bigint := 9007199254740992; -- 2^53, sluice.CounterCeiling
	live      bigint[] := '{}';
	nread     int;
	-- Counter state by key index; s_touched NULL: not touched by the group.
	s_tat     bigint[];
	s_frac    bigint[];
	s_drawn   bigint[];
	s_used    bigint[];
	s_res     bigint[];
	s_pend    bigint[];
	s_touched bigint[];
	-- A charge's counter before the charge was applied, to put it back.
	u_tat     bigint[];
	u_frac    bigint[];
	u_drawn   bigint[];
	u_res     bigint[];
	applied   boolean[];
	ins       int[] := '{}';
	r_dead    bigint[];
	now_ns    bigint;
	op_ok     boolean;
	with_row  boolean;
	pos       int;
	ci        int;
	lo        int;
	hi        int;
	amt       bigint;
	lim       bigint;
	win       bigint;
	aw        numeric;
	bw        numeric;
	d0        numeric;
	d1        numeric;
	ok        boolean;
	c_used    bigint;
	c_res     bigint;
	held      bigint;
	earliest  bigint;
BEGIN
	done := array_fill(false, ARRAY[nops]);
	allowed := array_fill(false, ARRAY[nch]);
	remaining := array_fill(0::bigint, ARRAY[nch]);
	used := array_fill(0::bigint, ARRAY[nch]);
	retry_after := array_fill(0::bigint, ARRAY[nch]);
	reset_at := array_fill(0::bigint, ARRAY[nch]);
	applied := array_fill(false, ARRAY[nch]);
	u_tat := array_fill(0::bigint, ARRAY[nch]);
	u_frac := array_fill(0::bigint, ARRAY[nch]);
	u_drawn := array_fill(0::bigint, ARRAY[nch]);
	u_res := array_fill(0::bigint, ARRAY[nch]);
	r_dead := array_fill(0::bigint, ARRAY[nops]);
	s_touched := array_fill(NULL::bigint, ARRAY[nk]);

	-- 1. The settlements' reservation rows, in batch_id order.
	IF coalesce(array_length(p_rows, 1), 0) > 0 THEN
		SELECT coalesce(array_agg(r.batch_id), '{}') INTO live
		FROM (SELECT x.batch_id FROM sluice_reservations x WHERE x.batch_id = ANY(p_rows)
			ORDER BY x.batch_id FOR UPDATE) r;
		DELETE FROM sluice_reservations x WHERE x.batch_id = ANY(live);
	END IF;

	-- 2. Every counter, created or locked in key order, then read.
	IF nk > 0 THEN
		INSERT INTO sluice_counters AS c (rule, subject, period)
		SELECT k.k_r, k.k_s, k.k_p FROM unnest(k_rule, k_subject, k_period) WITH ORDINALITY AS k(k_r, k_s, k_p, k_ord)
		ORDER BY k.k_ord
		ON CONFLICT (rule, subject, period) DO UPDATE SET tat = c.tat WHERE false;
		SELECT array_agg(c.tat ORDER BY k.k_ord), array_agg(c.frac ORDER BY k.k_ord), array_agg(c.drawn_at ORDER BY k.k_ord),
			array_agg(c.used ORDER BY k.k_ord), array_agg(c.reserved ORDER BY k.k_ord), array_agg(c.period_end ORDER BY k.k_ord),
			count(*)
		INTO s_tat, s_frac, s_drawn, s_used, s_res, s_pend, nread
		FROM unnest(k_rule, k_subject, k_period) WITH ORDINALITY AS k(k_r, k_s, k_p, k_ord)
		JOIN sluice_counters c ON c.rule = k.k_r AND c.subject = k.k_s AND c.period = k.k_p;
		IF nread <> nk THEN
			RAISE EXCEPTION 'sluice_apply: % counters locked, % read', nk, nread;
		END IF;
	END IF;

	-- 3. Each operation in turn.
	FOR o IN 1..nops LOOP
		now_ns := coalesce(p_now[o], db_now);
		lo := p_first[o];
		hi := p_first[o + 1] - 1;

		IF p_settle[o] THEN
			IF p_row[o] THEN
				pos := array_position(live, p_batch[o]);
				CONTINUE WHEN pos IS NULL; -- settled already, or swept
				live[pos] := NULL;
			END IF;
			done[o] := true;
			FOR i IN lo..hi LOOP
				ci := p_key[i];
				CASE p_kind[i]
				WHEN 1 THEN -- memstore bucket.adjust (0001's sluice_adjusted)
					lim := p_limit[i];
					aw := (p_actual[i] - p_amount[i])::numeric * p_window[i];
					bw := 2 * p_burst[i]::numeric * p_window[i];
					d1 := greatest((s_tat[ci] - now_ns)::numeric * s_drawn[ci] + s_frac[ci], 0);
					d1 := CASE WHEN aw > 0 THEN least(d1 + aw, bw) ELSE greatest(d1 + aw, 0) END;
					s_tat[ci] := now_ns + div(d1, lim);
					s_frac[ci] := mod(d1, lim);
					s_drawn[ci] := lim;
					s_touched[ci] := now_ns;
				WHEN 2 THEN
					s_res[ci] := greatest(0, s_res[ci] - p_amount[i]);
					s_used[ci] := least(s_used[ci] + p_actual[i], ceiling);
					s_pend[ci] := p_period_end[i];
					s_touched[ci] := now_ns;
				WHEN 3 THEN
					DELETE FROM sluice_leases l
					WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.batch_id = p_batch[o];
				END CASE;
			END LOOP;
			CONTINUE;
		END IF;

		-- An admission: 0001's sluice_admit on the state in memory.
		op_ok := true;
		FOR i IN lo..hi LOOP
			ci := p_key[i];
			amt := p_amount[i];
			lim := p_limit[i];
			CASE p_kind[i]
			WHEN 1 THEN -- rate: memstore bucket.check
				win := p_window[i];
				aw := amt::numeric * win;
				bw := p_burst[i]::numeric * win;
				IF op_ok THEN
					u_tat[i] := s_tat[ci];
					u_frac[i] := s_frac[ci];
					u_drawn[i] := s_drawn[ci];
					d1 := least(greatest((s_tat[ci] - now_ns)::numeric * s_drawn[ci] + s_frac[ci], 0) + aw, huge * lim);
					s_tat[ci] := now_ns + div(d1, lim);
					s_frac[ci] := mod(d1, lim);
					s_drawn[ci] := lim;
					applied[i] := true;
					d0 := d1 - aw;
				ELSE
					d0 := greatest((s_tat[ci] - now_ns)::numeric * s_drawn[ci] + s_frac[ci], 0);
					d1 := d0 + aw;
				END IF;
				ok := d1 <= huge * lim;
				IF ok AND d1 <= bw THEN
					allowed[i] := true;
					remaining[i] := div(bw - d1, win);
					reset_at[i] := now_ns + div(d1 + lim - 1, lim);
				ELSE
					remaining[i] := CASE WHEN d0 > bw THEN 0 ELSE div(bw - d0, win) END;
					reset_at[i] := now_ns + div(d0 + lim - 1, lim);
					retry_after[i] := CASE WHEN ok THEN div(d1 - bw + lim - 1, lim) ELSE huge END;
				END IF;
				used[i] := p_burst[i] - remaining[i];
			WHEN 2 THEN -- budget: a spent budget refuses even a charge of zero
				c_used := s_used[ci];
				c_res := s_res[ci];
				IF op_ok THEN
					u_res[i] := s_res[ci];
					s_res[ci] := least(s_res[ci] + amt, ceiling);
					s_pend[ci] := p_period_end[i];
					applied[i] := true;
				END IF;
				c_used := least(c_used + c_res, ceiling); -- what the budget holds
				allowed[i] := c_used + amt <= lim AND (amt > 0 OR c_used < lim);
				used[i] := c_used + CASE WHEN allowed[i] THEN amt ELSE 0 END;
				remaining[i] := greatest(0, lim - used[i]);
				reset_at[i] := p_period_end[i];
			WHEN 3 THEN -- concurrency: expired leases are pruned, live ones counted
				IF op_ok THEN
					WITH pruned AS (
						DELETE FROM sluice_leases l
						WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry <= now_ns
					)
					SELECT count(*), min(l.expiry) INTO held, earliest
					FROM sluice_leases l
					WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
				ELSE
					SELECT count(*), min(l.expiry) INTO held, earliest
					FROM sluice_leases l
					WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
				END IF;
				allowed[i] := held < lim;
				IF allowed[i] THEN
					held := held + 1;
				END IF;
				used[i] := held;
				remaining[i] := greatest(0, lim - held);
				IF earliest IS NOT NULL THEN
					reset_at[i] := earliest;
					IF NOT allowed[i] THEN
						retry_after[i] := earliest - now_ns;
					END IF;
				END IF;
			END CASE;
			IF NOT allowed[i] AND NOT p_shadow[i] THEN
				op_ok := false;
			END IF;
		END LOOP;

		IF NOT op_ok THEN
			-- Put back what was applied before the refusal was known.
			FOR i IN REVERSE hi..lo LOOP
				CONTINUE WHEN NOT applied[i];
				ci := p_key[i];
				IF p_kind[i] = 1 THEN
					s_tat[ci] := u_tat[i];
					s_frac[ci] := u_frac[i];
					s_drawn[ci] := u_drawn[i];
				ELSE
					s_res[ci] := u_res[i];
				END IF;
			END LOOP;
			CONTINUE;
		END IF;

		done[o] := true;
		FOR i IN lo..hi LOOP
			ci := p_key[i];
			s_touched[ci] := now_ns;
			IF p_kind[i] = 1 AND NOT allowed[i] AND p_amount[i] = 0 THEN
				-- A shadow charge of nothing over its limit changes nothing.
				s_tat[ci] := u_tat[i];
				s_frac[ci] := u_frac[i];
				s_drawn[ci] := u_drawn[i];
			ELSIF p_kind[i] = 1 AND NOT allowed[i] THEN
				-- A shadow charge over its limit is drawn like an overrun:
				-- into debt of at most one burst.
				bw := 2 * p_burst[i]::numeric * p_window[i];
				IF (s_tat[ci] - now_ns)::numeric * p_limit[i] + s_frac[ci] > bw THEN
					s_tat[ci] := now_ns + div(bw, p_limit[i]);
					s_frac[ci] := mod(bw, p_limit[i]);
				END IF;
			ELSIF p_kind[i] = 3 THEN
				INSERT INTO sluice_leases (rule, subject, period, batch_id, expiry)
				VALUES (p_rule[i], p_subject[i], p_period[i], p_batch[o], now_ns + p_ttl[o])
				ON CONFLICT DO NOTHING;
			END IF;
		END LOOP;
		IF p_row[o] THEN
			ins := array_append(ins, o);
			r_dead[o] := now_ns + p_ttl[o];
		END IF;
	END LOOP;

	-- 4. Each counter written once, if the group changed or touched it.
	IF nk > 0 THEN
		UPDATE sluice_counters c
		SET tat = x.x_tat, frac = x.x_frac, drawn_at = x.x_drawn, used = x.x_used, reserved = x.x_res,
			period_end = x.x_pend, touched = coalesce(x.x_touched, c.touched)
		FROM unnest(k_rule, k_subject, k_period, s_tat, s_frac, s_drawn, s_used, s_res, s_pend, s_touched)
			AS x(x_r, x_s, x_p, x_tat, x_frac, x_drawn, x_used, x_res, x_pend, x_touched)
		WHERE c.rule = x.x_r AND c.subject = x.x_s AND c.period = x.x_p
			AND (x.x_touched IS NOT NULL
				OR (c.tat, c.frac, c.drawn_at, c.used, c.reserved, c.period_end)
					IS DISTINCT FROM (x.x_tat, x.x_frac, x.x_drawn, x.x_used, x.x_res, x.x_pend));
	END IF;

	-- 5. The reservation rows of the admitted batches with a budget charge.
	IF coalesce(array_length(ins, 1), 0) > 0 THEN
		INSERT INTO sluice_reservations (batch_id, deadline, kind, rule, subject, period, amount, period_end, release)
		SELECT p_batch[x.x_o], r_dead[x.x_o],
			p_kind[p_first[x.x_o]:p_first[x.x_o + 1] - 1], p_rule[p_first[x.x_o]:p_first[x.x_o + 1] - 1],
			p_subject[p_first[x.x_o]:p_first[x.x_o + 1] - 1], p_period[p_first[x.x_o]:p_first[x.x_o + 1] - 1],
			p_amount[p_first[x.x_o]:p_first[x.x_o + 1] - 1], p_period_end[p_first[x.x_o]:p_first[x.x_o + 1] - 1],
			p_release[p_first[x.x_o]:p_first[x.x_o + 1] - 1]
		FROM unnest(ins) AS x(x_o);
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION sluice_settle(
	p_now bigint, p_batch bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_actual bigint[])
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	n      int := coalesce(array_length(p_kind, 1), 0);
	now_ns bigint := coalesce(p_now, sluice_now());
	dw     numeric;
	cap2   numeric;
BEGIN
	IF 2 = ANY(p_kind) THEN
		-- First, holding nothing: waiting here for a sweep that holds the
		-- row cannot deadlock, and finds the row gone once it commits.
		DELETE FROM sluice_reservations WHERE batch_id = p_batch;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	FOR i IN 1..n LOOP
		CASE p_kind[i]
		WHEN 1 THEN -- memstore bucket.adjust: a refund down to a full bucket, an overrun into debt of at most one burst
			dw := (p_actual[i] - p_amount[i])::numeric * p_window[i];
			cap2 := 2 * p_burst[i]::numeric * p_window[i];
			LOOP
				UPDATE sluice_counters c
				SET tat = now_ns + div(sluice_adjusted(c.tat, c.frac, c.drawn_at, now_ns, dw, cap2), p_limit[i]),
					frac = mod(sluice_adjusted(c.tat, c.frac, c.drawn_at, now_ns, dw, cap2), p_limit[i]),
					drawn_at = p_limit[i], touched = now_ns
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				EXIT WHEN FOUND;
				INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
				ON CONFLICT DO NOTHING;
			END LOOP;
		WHEN 2 THEN
			LOOP
				UPDATE sluice_counters c
				SET reserved = greatest(0, c.reserved - p_amount[i]), used = least(c.used::numeric + p_actual[i], 9007199254740992),
					period_end = p_period_end[i], touched = now_ns
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				EXIT WHEN FOUND;
				INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
				ON CONFLICT DO NOTHING;
			END LOOP;
		WHEN 3 THEN
			DELETE FROM sluice_leases l
			WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.batch_id = p_batch;
		END CASE;
	END LOOP;
	RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION sluice_sweep(p_now bigint, p_max int,
	OUT reservations int, OUT charged int, OUT released int)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
	ids    bigint[];
BEGIN
	SELECT coalesce(array_agg(r.batch_id), '{}') INTO ids
	FROM (SELECT batch_id FROM sluice_reservations WHERE deadline <= now_ns
		ORDER BY deadline LIMIT p_max FOR UPDATE SKIP LOCKED) r;
	reservations := coalesce(array_length(ids, 1), 0);
	charged := 0;
	released := 0;
	IF reservations = 0 THEN
		RETURN;
	END IF;
	INSERT INTO sluice_counters AS c (rule, subject, period)
	SELECT DISTINCT x.rule, x.subject COLLATE "C", x.period
	FROM sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind IN (2, 3)
	ORDER BY 1, 2, 3
	ON CONFLICT (rule, subject, period) DO UPDATE SET tat = c.tat WHERE false;
	UPDATE sluice_counters c
	SET reserved = greatest(0, c.reserved - s.amount), used = least(c.used + s.charge, 9007199254740992), period_end = s.period_end,
		touched = now_ns
	FROM (
		SELECT x.rule, x.subject, x.period, sum(x.amount) AS amount,
			sum(CASE WHEN x.release THEN 0 ELSE x.amount END) AS charge, max(x.period_end) AS period_end
		FROM sluice_reservations r,
			unnest(r.kind, r.rule, r.subject, r.period, r.amount, r.period_end, r.release)
				AS x(kind, rule, subject, period, amount, period_end, release)
		WHERE r.batch_id = ANY(ids) AND x.kind = 2
		GROUP BY x.rule, x.subject, x.period
	) s
	WHERE c.rule = s.rule AND c.subject = s.subject AND c.period = s.period;
	DELETE FROM sluice_leases l
	USING sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind = 3
		AND l.rule = x.rule AND l.subject = x.subject AND l.period = x.period AND l.batch_id = r.batch_id;
	SELECT count(*) FILTER (WHERE NOT x.release), count(*) FILTER (WHERE x.release) INTO charged, released
	FROM sluice_reservations r, unnest(r.kind, r.release) AS x(kind, release)
	WHERE r.batch_id = ANY(ids) AND x.kind = 2;
	DELETE FROM sluice_reservations WHERE batch_id = ANY(ids);
END
$$;

CREATE OR REPLACE FUNCTION sluice_admit(
	p_now bigint, p_peek boolean, p_batch bigint, p_ttl bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_shadow boolean[], p_release boolean[],
	OUT admitted boolean, OUT allowed boolean[], OUT remaining bigint[], OUT used bigint[],
	OUT retry_after bigint[], OUT reset_at bigint[])
LANGUAGE plpgsql AS $$
DECLARE
	n        int := coalesce(array_length(p_kind, 1), 0);
	now_ns   bigint := coalesce(p_now, sluice_now());
	applied  boolean[] := array_fill(false, ARRAY[n]);
	huge     numeric := 4611686018427387904; -- 2^62, memstore's bound on a quotient
	amt      bigint;
	lim      bigint;
	win      bigint;
	aw       numeric;
	bw       numeric;
	d0       numeric;
	d1       numeric;
	ok       boolean;
	c_tat    bigint;
	c_frac   bigint;
	c_drawn  bigint;
	c_used   bigint;
	c_res    bigint;
	in_use   bigint;
	held     bigint;
	earliest bigint;
BEGIN
	allowed := array_fill(false, ARRAY[n]);
	remaining := array_fill(0::bigint, ARRAY[n]);
	used := array_fill(0::bigint, ARRAY[n]);
	retry_after := array_fill(0::bigint, ARRAY[n]);
	reset_at := array_fill(0::bigint, ARRAY[n]);
	admitted := true;

	FOR i IN 1..n LOOP
		amt := CASE WHEN p_peek THEN 0 ELSE p_amount[i] END;
		lim := p_limit[i];
		CASE p_kind[i]
		WHEN 1 THEN -- rate: memstore bucket.check
			win := p_window[i];
			aw := amt::numeric * win;
			bw := p_burst[i]::numeric * win;
			IF admitted AND NOT p_peek THEN
				-- Lock and draw in one write; d1 is capped so that tat fits.
				LOOP
					UPDATE sluice_counters c
					SET prev_tat = c.tat, prev_frac = c.frac, prev_drawn_at = c.drawn_at,
						tat = now_ns + div(least(greatest((c.tat - now_ns)::numeric * c.drawn_at + c.frac, 0) + aw, huge * lim), lim),
						frac = mod(least(greatest((c.tat - now_ns)::numeric * c.drawn_at + c.frac, 0) + aw, huge * lim), lim),
						drawn_at = lim, touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
					RETURNING c.tat, c.frac INTO c_tat, c_frac;
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				applied[i] := true;
				d1 := (c_tat - now_ns)::numeric * lim + c_frac;
				d0 := d1 - aw;
			ELSE
				SELECT c.tat, c.frac, c.drawn_at INTO c_tat, c_frac, c_drawn
				FROM sluice_counters c
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
				d0 := greatest(coalesce((c_tat - now_ns)::numeric * c_drawn + c_frac, 0), 0);
				d1 := d0 + aw;
			END IF;
			ok := d1 <= huge * lim;
			IF ok AND d1 <= bw THEN
				allowed[i] := true;
				remaining[i] := div(bw - d1, win);
				reset_at[i] := now_ns + div(d1 + lim - 1, lim);
			ELSE
				remaining[i] := CASE WHEN d0 > bw THEN 0 ELSE div(bw - d0, win) END;
				reset_at[i] := now_ns + div(d0 + lim - 1, lim);
				retry_after[i] := CASE WHEN ok THEN div(d1 - bw + lim - 1, lim) ELSE huge END;
			END IF;
			used[i] := p_burst[i] - remaining[i];
		WHEN 2 THEN -- budget: a spent budget refuses even a charge of zero
			IF admitted AND NOT p_peek THEN
				LOOP
					UPDATE sluice_counters c
					SET reserved = least(c.reserved::numeric + amt, 9007199254740992), period_end = p_period_end[i], touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
					RETURNING c.used, c.reserved - amt INTO c_used, c_res;
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				applied[i] := true;
			ELSE
				SELECT c.used, c.reserved INTO c_used, c_res
				FROM sluice_counters c
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			END IF;
			in_use := least(coalesce(c_used, 0) + coalesce(c_res, 0), 9007199254740992);
			allowed[i] := in_use + amt <= lim AND (amt > 0 OR in_use < lim);
			IF allowed[i] THEN
				in_use := in_use + amt;
			END IF;
			used[i] := in_use;
			remaining[i] := greatest(0, lim - in_use);
			reset_at[i] := p_period_end[i];
		WHEN 3 THEN -- concurrency: expired leases are pruned, live ones counted
			IF admitted AND NOT p_peek THEN
				LOOP
					UPDATE sluice_counters c SET touched = now_ns
					WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
					EXIT WHEN FOUND;
					INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule[i], p_subject[i], p_period[i])
					ON CONFLICT DO NOTHING;
				END LOOP;
				WITH pruned AS (
					DELETE FROM sluice_leases l
					WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry <= now_ns
				)
				SELECT count(*), min(l.expiry) INTO held, earliest
				FROM sluice_leases l
				WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
			ELSE
				SELECT count(*), min(l.expiry) INTO held, earliest
				FROM sluice_leases l
				WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
			END IF;
			allowed[i] := held < lim;
			IF allowed[i] AND NOT p_peek THEN
				held := held + 1;
			END IF;
			used[i] := held;
			remaining[i] := greatest(0, lim - held);
			IF earliest IS NOT NULL THEN
				reset_at[i] := earliest;
				IF NOT allowed[i] THEN
					retry_after[i] := earliest - now_ns;
				END IF;
			END IF;
		END CASE;
		IF NOT allowed[i] AND NOT p_shadow[i] THEN
			admitted := false;
		END IF;
	END LOOP;
	IF p_peek THEN
		RETURN;
	END IF;

	IF NOT admitted THEN
		-- Put back what was applied before the refusal was known.
		FOR i IN 1..n LOOP
			CONTINUE WHEN NOT applied[i];
			IF p_kind[i] = 1 THEN
				UPDATE sluice_counters c SET tat = c.prev_tat, frac = c.prev_frac, drawn_at = c.prev_drawn_at
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			ELSE
				UPDATE sluice_counters c SET reserved = c.reserved - p_amount[i]
				WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			END IF;
		END LOOP;
		RETURN;
	END IF;

	FOR i IN 1..n LOOP
		IF p_kind[i] = 1 AND NOT allowed[i] AND p_amount[i] = 0 THEN
			-- A shadow charge of nothing over its limit changes nothing.
			UPDATE sluice_counters c SET tat = c.prev_tat, frac = c.prev_frac, drawn_at = c.prev_drawn_at
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		ELSIF p_kind[i] = 1 AND NOT allowed[i] THEN
			-- A shadow charge over its limit is drawn like an overrun: into
			-- debt of at most one burst.
			bw := 2 * p_burst[i]::numeric * p_window[i];
			UPDATE sluice_counters c
			SET tat = now_ns + div(bw, p_limit[i]), frac = mod(bw, p_limit[i])
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i]
				AND (c.tat - now_ns)::numeric * p_limit[i] + c.frac > bw;
		ELSIF p_kind[i] = 3 THEN
			INSERT INTO sluice_leases (rule, subject, period, batch_id, expiry)
			VALUES (p_rule[i], p_subject[i], p_period[i], p_batch, now_ns + p_ttl)
			ON CONFLICT DO NOTHING;
		END IF;
	END LOOP;
	IF 2 = ANY(p_kind) THEN
		INSERT INTO sluice_reservations (batch_id, deadline, kind, rule, subject, period, amount, period_end, release)
		VALUES (p_batch, now_ns + p_ttl, p_kind, p_rule, p_subject, p_period, p_amount, p_period_end, p_release);
	END IF;
END
$$;
