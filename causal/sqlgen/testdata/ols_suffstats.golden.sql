SELECT
    toFloat64(count()) AS n,
    sum(tc_x0 * tc_x0) AS xx_0_0,
    sum(tc_x0 * tc_x1) AS xx_0_1,
    sum(tc_x0 * tc_x2) AS xx_0_2,
    sum(tc_x0 * tc_x3) AS xx_0_3,
    sum(tc_x1 * tc_x1) AS xx_1_1,
    sum(tc_x1 * tc_x2) AS xx_1_2,
    sum(tc_x1 * tc_x3) AS xx_1_3,
    sum(tc_x2 * tc_x2) AS xx_2_2,
    sum(tc_x2 * tc_x3) AS xx_2_3,
    sum(tc_x3 * tc_x3) AS xx_3_3,
    sum(tc_x0 * tc_y) AS xy_0,
    sum(tc_x1 * tc_y) AS xy_1,
    sum(tc_x2 * tc_y) AS xy_2,
    sum(tc_x3 * tc_y) AS xy_3,
    sum(tc_y * tc_y) AS yy
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
