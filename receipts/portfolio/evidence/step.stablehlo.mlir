module @jit__sharded_body attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}]>}, %arg2: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}]>}, %arg3: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg4: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<8xf32> {jax.result_info = "result[0]"}, tensor<8xf32> {jax.result_info = "result[1]"}, tensor<f32> {jax.result_info = "result[2]"}, tensor<8xf32> {jax.result_info = "result[3]"}) {
    %0:4 = sdy.manual_computation(%arg0, %arg1, %arg2, %arg3, %arg4) in_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{"data"}]>, <@mesh, [{"data"}]>, <@mesh, [{}]>, <@mesh, [{}]>] out_shardings=[<@mesh, [{}]>, <@mesh, [{}]>, <@mesh, []>, <@mesh, [{}]>] manual_axes={"data"} (%arg5: tensor<2x8xf32>, %arg6: tensor<2xf32>, %arg7: tensor<2xf32>, %arg8: tensor<8xf32>, %arg9: tensor<8xf32>) {
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %2 = stablehlo.compare GT, %arg7, %1, FLOAT : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
      %3 = stablehlo.dot_general %arg5, %arg8, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2xf32>
      %4 = stablehlo.subtract %3, %arg6 : tensor<2xf32>
      %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %5 = func.call @_where(%2, %4, %cst_0) : (tensor<2xi1>, tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
      %6 = stablehlo.convert %2 : (tensor<2xi1>) -> tensor<2xf32>
      %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %7 = stablehlo.reduce(%6 init: %cst_1) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
      %8 = stablehlo.broadcast_in_dim %2, dims = [0] : (tensor<2xi1>) -> tensor<2x1xi1>
      %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %9 = func.call @_where_0(%8, %arg5, %cst_2) : (tensor<2x1xi1>, tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
      %10 = stablehlo.dot_general %5, %9, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2xf32>, tensor<2x8xf32>) -> tensor<8xf32>
      %cst_3 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %11 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %12 = stablehlo.multiply %11, %10 : tensor<8xf32>
      %13 = stablehlo.multiply %5, %5 : tensor<2xf32>
      %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %14 = stablehlo.reduce(%13 init: %cst_4) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
      %15 = "stablehlo.all_reduce"(%7) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %27 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %27 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      %16 = "stablehlo.all_reduce"(%12) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %27 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %27 : tensor<f32>
      }) : (tensor<8xf32>) -> tensor<8xf32>
      %17 = "stablehlo.all_reduce"(%14) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %27 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %27 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      %18 = stablehlo.broadcast_in_dim %15, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %19 = stablehlo.divide %16, %18 : tensor<8xf32>
      %20 = stablehlo.divide %17, %15 : tensor<f32>
      %cst_5 = stablehlo.constant dense<8.000000e-01> : tensor<f32>
      %21 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %22 = stablehlo.multiply %21, %arg9 : tensor<8xf32>
      %23 = stablehlo.add %22, %19 : tensor<8xf32>
      %cst_6 = stablehlo.constant dense<3.000000e-02> : tensor<f32>
      %24 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %25 = stablehlo.multiply %24, %23 : tensor<8xf32>
      %26 = stablehlo.subtract %arg8, %25 : tensor<8xf32>
      sdy.return %26, %23, %20, %19 : tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>
    } : (tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>)
    return %0#0, %0#1, %0#2, %0#3 : tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>
  }
  func.func private @_where(%arg0: tensor<2xi1>, %arg1: tensor<2xf32>, %arg2: tensor<f32>) -> tensor<2xf32> {
    %0 = stablehlo.convert %arg2 : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %2 = stablehlo.select %arg0, %arg1, %1 : tensor<2xi1>, tensor<2xf32>
    return %2 : tensor<2xf32>
  }
  func.func private @_where_0(%arg0: tensor<2x1xi1>, %arg1: tensor<2x8xf32>, %arg2: tensor<f32>) -> tensor<2x8xf32> {
    %0 = stablehlo.convert %arg2 : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %arg0, dims = [0, 1] : (tensor<2x1xi1>) -> tensor<2x8xi1>
    %2 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
    %3 = stablehlo.select %1, %arg1, %2 : tensor<2x8xi1>, tensor<2x8xf32>
    return %3 : tensor<2x8xf32>
  }
}
