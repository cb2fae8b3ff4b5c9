// shoald's answers to gRPC server reflection requests, message by message.
#include "server/rpc/reflection.h"

#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include "grpc/reflection/v1alpha/reflection.pb.h"

namespace shoal {
namespace {

namespace refl = grpc::reflection::v1alpha;

refl::ServerReflectionResponse Ask(const refl::ServerReflectionRequest& req) {
  refl::ServerReflectionResponse resp;
  EXPECT_TRUE(resp.ParseFromString(AnswerReflection(req.SerializeAsString())));
  return resp;
}

TEST(ReflectionTest, ListsTheServicesItCanDescribe) {
  refl::ServerReflectionRequest req;
  req.set_host("h");
  req.set_list_services("");
  const auto resp = Ask(req);
  ASSERT_EQ(resp.list_services_response().service_size(), 2);
  EXPECT_EQ(resp.list_services_response().service(0).name(), "shoal.v1.Shoal");
  EXPECT_EQ(resp.list_services_response().service(1).name(),
            "grpc.reflection.v1alpha.ServerReflection");
  EXPECT_EQ(resp.valid_host(), "h");
  EXPECT_TRUE(resp.original_request().has_list_services());
}

TEST(ReflectionTest, ASymbolGivesItsFileWhoseServiceIsWhole) {
  refl::ServerReflectionRequest req;
  req.set_file_containing_symbol("shoal.v1.Shoal.Watch");  // a method names its service's file
  const auto resp = Ask(req);
  ASSERT_TRUE(resp.has_file_descriptor_response()) << resp.error_response().error_message();
  const auto& files = resp.file_descriptor_response().file_descriptor_proto();
  ASSERT_FALSE(files.empty());
  google::protobuf::FileDescriptorProto last;
  ASSERT_TRUE(last.ParseFromString(files[files.size() - 1]));  // imports first, the file last
  EXPECT_EQ(last.name(), "shoal/v1/shoal.proto");
  ASSERT_EQ(last.service_size(), 1);
  const auto* compiled =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("shoal.v1.Shoal");
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(last.service(0).method_size(), compiled->method_count());
}

TEST(ReflectionTest, AFileByNameAndTheUnknownAndTheMalformed) {
  refl::ServerReflectionRequest req;
  req.set_file_by_filename("grpc/reflection/v1alpha/reflection.proto");
  EXPECT_EQ(Ask(req).file_descriptor_response().file_descriptor_proto_size(), 1);
  req.set_file_containing_symbol("shoal.v1.NoSuch");
  auto resp = Ask(req);
  EXPECT_EQ(resp.error_response().error_code(), int(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(resp.error_response().error_message(), "symbol 'shoal.v1.NoSuch' is not known");
  req.set_all_extension_numbers_of_type("shoal.v1.ExperimentSpec");
  EXPECT_EQ(Ask(req).error_response().error_code(), int(grpc::StatusCode::NOT_FOUND));
  refl::ServerReflectionResponse bad;
  ASSERT_TRUE(bad.ParseFromString(AnswerReflection("\xff\xff\xff")));
  EXPECT_EQ(bad.error_response().error_code(), int(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(Ask(refl::ServerReflectionRequest()).error_response().error_code(),
            int(grpc::StatusCode::INVALID_ARGUMENT));
}

}  // namespace
}  // namespace shoal
