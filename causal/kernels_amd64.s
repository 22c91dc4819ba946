#include "textflag.h"

// func dotFMA(x, y []float64) float64
// Σ x[i]·y[i] over len(x) (y at least as long), AVX2 with FMA.
TEXT ·dotFMA(SB), NOSPLIT, $0-56
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-16, DX
	JZ   reduce

loop16:
	VMOVUPD     (SI)(AX*8), Y4
	VMOVUPD     32(SI)(AX*8), Y5
	VMOVUPD     64(SI)(AX*8), Y6
	VMOVUPD     96(SI)(AX*8), Y7
	VFMADD231PD (DI)(AX*8), Y4, Y0
	VFMADD231PD 32(DI)(AX*8), Y5, Y1
	VFMADD231PD 64(DI)(AX*8), Y6, Y2
	VFMADD231PD 96(DI)(AX*8), Y7, Y3
	ADDQ        $16, AX
	CMPQ        AX, DX
	JL          loop16

reduce:
	VADDPD       Y1, Y0, Y0
	VADDPD       Y3, Y2, Y2
	VADDPD       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VUNPCKHPD    X0, X0, X1
	VADDSD       X1, X0, X0

tail:
	CMPQ        AX, CX
	JGE         done
	VMOVSD      (SI)(AX*8), X4
	VFMADD231SD (DI)(AX*8), X4, X0
	INCQ        AX
	JMP         tail

done:
	VZEROUPPER
	MOVSD X0, ret+48(FP)
	RET

// func axpyFMA(a float64, x, y []float64)
// y[i] += a·x[i] over len(x) (y at least as long), AVX2 with FMA.
TEXT ·axpyFMA(SB), NOSPLIT, $0-56
	VBROADCASTSD a+0(FP), Y0
	MOVQ         x_base+8(FP), SI
	MOVQ         x_len+16(FP), CX
	MOVQ         y_base+32(FP), DI
	XORQ         AX, AX
	MOVQ         CX, DX
	ANDQ         $-8, DX
	JZ           atail

aloop8:
	VMOVUPD     (DI)(AX*8), Y1
	VMOVUPD     32(DI)(AX*8), Y2
	VFMADD231PD (SI)(AX*8), Y0, Y1
	VFMADD231PD 32(SI)(AX*8), Y0, Y2
	VMOVUPD     Y1, (DI)(AX*8)
	VMOVUPD     Y2, 32(DI)(AX*8)
	ADDQ        $8, AX
	CMPQ        AX, DX
	JL          aloop8

atail:
	CMPQ        AX, CX
	JGE         adone
	VMOVSD      (DI)(AX*8), X1
	VFMADD231SD (SI)(AX*8), X0, X1
	VMOVSD      X1, (DI)(AX*8)
	INCQ        AX
	JMP         atail

adone:
	VZEROUPPER
	RET

// func cpuid(op, op2 uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL op+0(FP), AX
	MOVL op2+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() uint32
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL   $0, CX
	XGETBV
	MOVL   AX, ret+0(FP)
	RET

// func hingeAVX(k float64, x, dst []float64)
// dst[i] = x[i]−k > 0 ? x[i]−k : 0 over len(x) (MAXPD returns its second
// operand when the first is NaN or not greater: ClickHouse's greatest).
TEXT ·hingeAVX(SB), NOSPLIT, $0-56
	VBROADCASTSD k+0(FP), Y0
	VXORPD       Y3, Y3, Y3
	MOVQ         x_base+8(FP), SI
	MOVQ         x_len+16(FP), CX
	MOVQ         dst_base+32(FP), DI
	XORQ         AX, AX
	MOVQ         CX, DX
	ANDQ         $-8, DX
	JZ           htail

hloop8:
	VMOVUPD (SI)(AX*8), Y1
	VMOVUPD 32(SI)(AX*8), Y2
	VSUBPD  Y0, Y1, Y1
	VSUBPD  Y0, Y2, Y2
	VMAXPD  Y3, Y1, Y1
	VMAXPD  Y3, Y2, Y2
	VMOVUPD Y1, (DI)(AX*8)
	VMOVUPD Y2, 32(DI)(AX*8)
	ADDQ    $8, AX
	CMPQ    AX, DX
	JL      hloop8

htail:
	CMPQ   AX, CX
	JGE    hdone
	VMOVSD (SI)(AX*8), X1
	VSUBSD X0, X1, X1
	VMAXSD X3, X1, X1
	VMOVSD X1, (DI)(AX*8)
	INCQ   AX
	JMP    htail

hdone:
	VZEROUPPER
	RET

// func quadFMA(h *float64, x **float64, a *float64, m, n int)
// For i < n: w = a[0]·x[0][i], then w = fma(a[l], x[l][i], w) for l = 1 …
// m−1 in order, then h[i] += x[0][i]·w (product rounded, then the sum):
// the arithmetic of a scaling, m−1 axpyFMA calls and a multiply-add loop
// over one buffer w, without storing w (16 rows per step, in registers).
TEXT ·quadFMA(SB), NOSPLIT, $0-40
	MOVQ h+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ a+16(FP), BX
	MOVQ m+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ (SI), R9
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-16, DX
	JZ   qtail

qloop16:
	VBROADCASTSD (BX), Y0
	VMULPD       (R9)(AX*8), Y0, Y1
	VMULPD       32(R9)(AX*8), Y0, Y2
	VMULPD       64(R9)(AX*8), Y0, Y3
	VMULPD       96(R9)(AX*8), Y0, Y4
	MOVQ         $1, R10

qinner:
	CMPQ         R10, R8
	JGE          qfinish
	MOVQ         (SI)(R10*8), R11
	VBROADCASTSD (BX)(R10*8), Y0
	VFMADD231PD  (R11)(AX*8), Y0, Y1
	VFMADD231PD  32(R11)(AX*8), Y0, Y2
	VFMADD231PD  64(R11)(AX*8), Y0, Y3
	VFMADD231PD  96(R11)(AX*8), Y0, Y4
	INCQ         R10
	JMP          qinner

qfinish:
	VMULPD  (R9)(AX*8), Y1, Y1
	VMULPD  32(R9)(AX*8), Y2, Y2
	VMULPD  64(R9)(AX*8), Y3, Y3
	VMULPD  96(R9)(AX*8), Y4, Y4
	VADDPD  (DI)(AX*8), Y1, Y1
	VADDPD  32(DI)(AX*8), Y2, Y2
	VADDPD  64(DI)(AX*8), Y3, Y3
	VADDPD  96(DI)(AX*8), Y4, Y4
	VMOVUPD Y1, (DI)(AX*8)
	VMOVUPD Y2, 32(DI)(AX*8)
	VMOVUPD Y3, 64(DI)(AX*8)
	VMOVUPD Y4, 96(DI)(AX*8)
	ADDQ    $16, AX
	CMPQ    AX, DX
	JL      qloop16

qtail:
	CMPQ   AX, CX
	JGE    qdone
	VMOVSD (R9)(AX*8), X5
	VMOVSD (BX), X0
	VMULSD X5, X0, X1
	MOVQ   $1, R10

qtinner:
	CMPQ        R10, R8
	JGE         qtfinish
	MOVQ        (SI)(R10*8), R11
	VMOVSD      (BX)(R10*8), X0
	VMOVSD      (R11)(AX*8), X6
	VFMADD231SD X6, X0, X1
	INCQ        R10
	JMP         qtinner

qtfinish:
	VMULSD X5, X1, X1
	VADDSD (DI)(AX*8), X1, X1
	VMOVSD X1, (DI)(AX*8)
	INCQ   AX
	JMP    qtail

qdone:
	VZEROUPPER
	RET
