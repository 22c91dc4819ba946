SELECT
    toFloat64(count()) AS n,
    max(tc_h) AS h_max,
    sum(tc_w0 * tc_u2 * tc_u2) AS v0_2,
    sum(tc_w3 * tc_u2 * tc_u2) AS v3_2
FROM
(
    SELECT
        *,
        tc_e * tc_e AS tc_w0,
        tc_e * tc_e / ((1 - tc_h) * (1 - tc_h)) AS tc_w3,
        (-0.0003807706111456997) * tc_x0 + 0.0006009995827452722 * tc_x1 + 0.19059067053794593 * tc_x2 + (-0.011813665952726432) * tc_x3 AS tc_u2
    FROM
    (
        SELECT
            *,
            (tc_y) - (2.0687080159073163 * tc_x0 + 0.7868586709652546 * tc_x1 + 2.9816889288984156 * tc_x2 + (-0.44251499777066) * tc_x3) AS tc_e,
            0.176646893096838 * tc_x0 * tc_x0 + (-0.02873210998353921) * tc_x0 * tc_x1 + (-0.0007615412222913994) * tc_x0 * tc_x2 + (-0.03274872412902373) * tc_x0 * tc_x3 + 0.003957458781429491 * tc_x1 * tc_x1 + 0.0012019991654905445 * tc_x1 * tc_x2 + (-0.0010360556166213771) * tc_x1 * tc_x3 + 0.19059067053794593 * tc_x2 * tc_x2 + (-0.023627331905452863) * tc_x2 * tc_x3 + 0.004402509183548957 * tc_x3 * tc_x3 AS tc_h
        FROM
        (
            SELECT *
            FROM
            (
                SELECT
                    toFloat64(1) AS tc_x0,
                    toFloat64(x1) AS tc_x1,
                    toFloat64(x2) AS tc_x2,
                    toFloat64(x3) AS tc_x3,
                    toFloat64(y) AS tc_y
                FROM ols_data
                WHERE y > -1000
            )
            WHERE isFinite(tc_x0 + tc_x1 + tc_x2 + tc_x3 + tc_y)
        )
    )
)
